"""vLLM's top-p step alone, on the GPU: microseconds a call of ``apply_top_k_top_p`` (the function vLLM's Model
Runner V2 sampler calls with top-p on and no top-k) on float32 logits of the 8B vocabulary, per batch size.

Why: a cluster install's inference with top-p 0.95 decodes about 5 ms a step slower on vLLM 0.31 than on 0.26
(benchmarks/README.md, fifteenth and sixteenth leases), the same at 144 and 256 sequences a step, and equal with
top-p off; launching 0.31's kernel with 0.26's 4 warps did not change it. This times the step without the engine
around it, so one can tell the kernel (its source, or the Triton that compiles it) from the rest of the sampler:

* ``vllm``: this vLLM's own ``apply_top_k_top_p``;
* ``--kernel-source FILE``: also another release's ``vllm/v1/sample/ops/topk_topp_triton.py``, loaded from FILE
  as a module of its own and compiled by this Triton (its ``apply_top_k_top_p_triton``).

Logits are Gaussian with standard deviation ``--logit-std`` (8: about 1.5 nats, a 0.95 nucleus of a dozen tokens,
the peaked head of gpu_inference.py ``--peaked-logits 8``; 1.3: the random model's nearly flat head). Each timed
call gets a fresh copy of the logits (the step masks them in place); the copy alone is timed too and taken off.

    python benchmarks/gpu_top_p_kernel.py --batch-sizes 32 144 256 \
        --kernel-source /path/to/vllm-0.26/vllm/v1/sample/ops/topk_topp_triton.py
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("gpu_top_p_kernel")

VOCAB = 128_256  # Llama 3.1's


def load_kernel_source(path: Path) -> Callable[..., Any]:
    """``apply_top_k_top_p_triton`` of a ``topk_topp_triton.py`` file, imported under a name of its own."""
    spec = importlib.util.spec_from_file_location("other_release_topk_topp_triton", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "apply_top_k_top_p_triton"):
        raise SystemExit(f"{path}: has no apply_top_k_top_p_triton")
    return module.apply_top_k_top_p_triton


def time_calls(step: Callable[[Any], Any], logits: Any, calls: int) -> float:
    """Mean microseconds of ``step(copy of logits)`` over ``calls`` calls, the copy's own time taken off."""
    import torch

    work = torch.empty_like(logits)

    def run(with_step: bool) -> float:
        for _ in range(5):  # warm-up: compile, caches
            work.copy_(logits)
            if with_step:
                step(work)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(calls):
            work.copy_(logits)
            if with_step:
                step(work)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000 / calls

    return run(True) - run(False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 144, 256])
    parser.add_argument("--logit-std", type=float, default=8.0)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--kernel-source", type=Path, help="another release's topk_topp_triton.py")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import torch
    import triton
    import vllm
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    steps: dict[str, Callable[..., Any]] = {f"vllm {vllm.__version__}": apply_top_k_top_p}
    if args.kernel_source:
        steps[f"{args.kernel_source.parent.name}/{args.kernel_source.name} (--kernel-source)"] = load_kernel_source(
            args.kernel_source
        )
    generator = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for batch in args.batch_sizes:
        logits = torch.randn(batch, VOCAB, device="cuda", generator=generator) * args.logit_std
        top_p = torch.full((batch,), args.top_p, device="cuda")
        probs = torch.softmax(logits[:8], dim=-1)
        nucleus = ((probs.sort(dim=-1, descending=True).values.cumsum(-1) < args.top_p).sum(-1) + 1).float().mean()
        for name, function in steps.items():
            micros = time_calls(lambda work, f=function, p=top_p: f(work, None, p), logits, args.calls)
            rows.append((batch, name, micros, nucleus.item()))
            log.info("batch %d, %s: %.0f us", batch, name, micros)
    print(
        f"\ndevice: {torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}, "
        f"vLLM {vllm.__version__}; logits N(0, {args.logit_std:g}^2) over {VOCAB:,} tokens, top-p {args.top_p}, "
        f"{args.calls} calls each\n"
    )
    print("| batch | top-p step | us a call | 0.95 nucleus (tokens) |")
    print("|---:|---|---:|---:|")
    for batch, name, micros, nucleus in rows:
        print(f"| {batch} | {name} | {micros:,.0f} | {nucleus:.1f} |")


if __name__ == "__main__":
    main()
