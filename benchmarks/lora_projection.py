"""One decoder layer's LoRA projections, forward and backward, PEFT's way against ``train.fused_lora``'s.

The 8B policy's seven projection shapes (Llama-3.1-8B: hidden 4,096, MLP 14,336, 8 key-value heads of 128), the
preset's LoRA (rank 1, rsLoRA, alpha 64), the base frozen in bfloat16 and the adapter in float32 as PEFT keeps
it, under bfloat16 autocast as the trainer runs them; ``--tokens`` rows per call (the preset's chunk: 2,100).
For each projection and each way (``WAYS``; the frozen projection alone is one, to show what the branch adds):
milliseconds per forward + backward (median of ``--repeats``), and on a GPU the peak memory the call adds. The
step estimate multiplies one layer's time by 32 layers and by the chunks of the preset's step (``--step-tokens``
/ ``--tokens``); the step's own figure is benchmarks/gpu_grpo.py's.

With ``--profile``, instead: each way's layer (the seven projections, forward and backward) under torch.profiler,
its kernels by device time (on a CPU: its operators by CPU time), to say which of a branch's products and adds
cost what.

With ``--host-device`` (GPU only), instead: each way's layer split into the host's time to issue its work and the
GPU's time to run it, the GPU held busy by a sleep kernel while the host issues (so neither waits for the other).
A way whose host time exceeds its device time is host-bound: in the step its layer runs at the host's pace, so
faster kernels do not shorten it, and a second thread of the process (the overlap's decoding thread) slows it.

    python benchmarks/lora_projection.py                      # the device there is (a GPU if one is visible)
    python benchmarks/lora_projection.py --tokens 256 --repeats 3 --device cpu
    python benchmarks/lora_projection.py --profile            # kernel tables, PEFT's way and the fused ones
    python benchmarks/lora_projection.py --host-device        # host and device time of each way's layer
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from arc_pipeline.training.speed import fused_lora
from arc_pipeline.training.speed.fused_lora import fuse_lora_projections

log = logging.getLogger("lora_projection")

# Llama-3.1-8B's projections: (name, input width, output width)
PROJECTIONS = (
    ("q_proj", 4096, 4096),
    ("k_proj", 4096, 1024),
    ("v_proj", 4096, 1024),
    ("o_proj", 4096, 4096),
    ("gate_proj", 4096, 14336),
    ("up_proj", 4096, 14336),
    ("down_proj", 14336, 4096),
)
LAYERS = 32


@dataclass
class Timing:
    projection: str
    way: str
    milliseconds: float
    peak_mib: float | None


def lora_projection(width_in: int, width_out: int, rank: int, device: str):
    """A PEFT-wrapped frozen bfloat16 projection with the preset's LoRA, lora_B off its zero start."""
    from peft import LoraConfig, get_peft_model

    base = torch.nn.Sequential(torch.nn.Linear(width_in, width_out, bias=False))
    base = base.to(device=device, dtype=torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=64, use_rslora=True, target_modules=["0"]))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.01)
    return model


def forward_backward(model, inputs: torch.Tensor, grad_out: torch.Tensor) -> None:
    """One call as the trainer makes it: forward under bfloat16 autocast, backward from ``grad_out``."""
    x = inputs.detach().requires_grad_(True)
    with torch.autocast(inputs.device.type, dtype=torch.bfloat16):
        out = model(x)
    out.backward(grad_out)


def layer_of_projections(tokens: int, rank: int, device: str, projections=PROJECTIONS) -> tuple[list, list]:
    """One decoder layer's LoRA projections, and for each a ``tokens``-row input and output gradient."""
    models = [lora_projection(width_in, width_out, rank, device) for _, width_in, width_out in projections]
    data = [
        (
            torch.randn(tokens, width_in, device=device, dtype=torch.bfloat16),
            torch.randn(tokens, width_out, device=device, dtype=torch.bfloat16),
        )
        for _, width_in, width_out in projections
    ]
    return models, data


def timed_module(model, way: str):
    """What ``way`` times of a PEFT-wrapped projection: the frozen projection alone for ``base``, else all of it."""
    return model.base_model.model[0].base_layer if way == "base" else model


def call_layer(models: list, data: list) -> None:
    """The layer's forward and backward: each projection's, in the layer's order."""
    for model, (inputs, grad_out) in zip(models, data, strict=True):
        forward_backward(model, inputs, grad_out)


def time_calls(model, inputs: torch.Tensor, grad_out: torch.Tensor, repeats: int) -> tuple[float, float | None]:
    """Median milliseconds of forward + backward (``grad_out``: the output's gradient), and the peak memory one
    call adds (MiB, GPU only)."""
    device = inputs.device.type

    forward_backward(model, inputs, grad_out)  # warm-up (cuBLAS handles, kernel choice)
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        forward_backward(model, inputs, grad_out)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    peak = None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        forward_backward(model, inputs, grad_out)
        peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    return statistics.median(times), peak


# the ways of computing the projections: PEFT's; train.fused_lora's (its rank-1 products as matrix-vector
# products and an outer product); the same function with every product a matrix-matrix one of one column or one
# row (in case bfloat16 matrix-vector products or the outer product's elementwise kernel are the slow part); with
# its thin products as an elementwise product and a sum (no BLAS call); and the frozen projection alone, without
# its LoRA branch (what any way of computing the branch costs on top of it). On a GPU also ``triton``:
# train.fused_lora_kernels triton's kernels (arc_pipeline/training/speed/rank1_kernels.py), rank 1.
WAYS = ("peft", "fused", "fused-mm", "fused-reduce", "base")
# the ways --profile tabulates (the fused ones whose kernels differ)
PROFILED = ("peft", "fused", "fused-mm")
# the ways that fuse the projections first, with train.fused_lora_kernels' choice (the later fused ways reuse them)
FUSED_WITH = {"fused": "torch", "triton": "triton"}


def ways_on(device: str, ways: tuple[str, ...] = WAYS) -> tuple[str, ...]:
    """``ways``, with ``triton`` before ``base`` on a GPU (Triton compiles for GPUs; its CPU interpreter is a test
    tool, not a speed)."""
    if device != "cuda":
        return ways
    return (*(way for way in ways if way != "base"), "triton", *(way for way in ways if way == "base"))


def times_thin_by_reduction(matrix: torch.Tensor, thin: torch.Tensor) -> torch.Tensor:
    """``matrix @ thin`` as a broadcast product summed over the contracted dimension (no BLAS call)."""
    return (matrix.unsqueeze(-1) * thin.unsqueeze(0)).sum(dim=1)


def times_thin_by_mm(matrix: torch.Tensor, thin: torch.Tensor) -> torch.Tensor:
    """``matrix @ thin`` as a matrix-matrix product whatever the rank."""
    return torch.mm(matrix, thin)


def add_product_by_mm(out: torch.Tensor, left: torch.Tensor, right: torch.Tensor, alpha: float = 1.0) -> None:
    """``out += alpha * left @ right`` as a matrix-matrix product of inner size r, rank 1 included."""
    out.addmm_(left, right, alpha=alpha)


# the fused function's helpers each way swaps in (the rest run train.fused_lora's own)
SWAPS = {
    "fused-mm": {"_times_thin": times_thin_by_mm, "_add_product": add_product_by_mm},
    "fused-reduce": {"_times_thin": times_thin_by_reduction},
}


@contextmanager
def swapped_helpers(way: str) -> Iterator[None]:
    """``way``'s helpers in train.fused_lora's function while the block runs (none for the other ways)."""
    own = {helper: getattr(fused_lora, helper) for helper in SWAPS.get(way, {})}
    for helper, swapped in SWAPS.get(way, {}).items():
        setattr(fused_lora, helper, swapped)
    try:
        yield
    finally:
        for helper, original in own.items():
            setattr(fused_lora, helper, original)


def measure(tokens: int, rank: int, repeats: int, device: str, projections=PROJECTIONS) -> list[Timing]:
    timings = []
    for name, width_in, width_out in projections:
        model = lora_projection(width_in, width_out, rank, device)
        inputs = torch.randn(tokens, width_in, device=device, dtype=torch.bfloat16)
        grad_out = torch.randn(tokens, width_out, device=device, dtype=torch.bfloat16)
        for way in ways_on(device):
            if way in FUSED_WITH:
                fuse_lora_projections(model, FUSED_WITH[way])
            timed = timed_module(model, way)
            try:
                with swapped_helpers(way):
                    milliseconds, peak = time_calls(timed, inputs, grad_out, repeats)
            except Exception:  # one way that fails (a kernel that does not compile) leaves the others' table
                log.exception("%s %s failed: left out of the table", name, way)
                continue
            timings.append(Timing(name, way, milliseconds, peak))
            log.info("%s %s: %.3f ms", name, way, milliseconds)
        del model, inputs, grad_out
    return timings


def profile_layer(tokens: int, rank: int, repeats: int, device: str, projections=PROJECTIONS) -> dict[str, str]:
    """For PEFT's way and the fused ones (``PROFILED``): a kernel table of ``repeats`` forward + backward calls of
    each projection (after one warm-up call each), sorted by device time (CPU time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    models, data = layer_of_projections(tokens, rank, device, projections)

    def layer_call() -> None:
        call_layer(models, data)

    tables = {}
    for way in ways_on(device, PROFILED):
        if way in FUSED_WITH:
            for model in models:
                fuse_lora_projections(model, FUSED_WITH[way])
        try:
            with swapped_helpers(way):
                layer_call()  # warm-up
                if device == "cuda":
                    torch.cuda.synchronize()
                with profile(activities=activities) as profiler:
                    for _ in range(repeats):
                        layer_call()
                    if device == "cuda":
                        torch.cuda.synchronize()
        except Exception:  # as in measure(): the other ways' tables still come back
            log.exception("%s failed: no kernel table for it", way)
            continue
        tables[way] = profiler.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=70)
    return tables


@dataclass
class HostDevice:
    way: str
    host_ms: float  # the host's time to issue one layer's forward and backward
    device_ms: float  # the GPU's time to run them, back to back


# GPU clock cycles the sleep kernel holds the GPU for while the host issues a layer (about 50 ms at 2 GHz: a
# layer's host time is under 10 ms)
SLEEP_CYCLES = 100_000_000


def measure_host_device(tokens: int, rank: int, repeats: int, projections=PROJECTIONS) -> list[HostDevice]:
    """Each way's layer (``ways_on("cuda")``): the host's time to issue it and the GPU's to run it (medians of
    ``repeats``). A sleep kernel goes first, so the host issues the whole layer while the GPU is busy (its time
    is the host's alone) and the layer's kernels then run back to back (CUDA events around them: the GPU's
    alone)."""
    models, data = layer_of_projections(tokens, rank, "cuda", projections)
    results = []
    for way in ways_on("cuda"):
        if way in FUSED_WITH:
            for model in models:
                fuse_lora_projections(model, FUSED_WITH[way])
        timed = [timed_module(model, way) for model in models]

        def layer_call(timed: list = timed) -> None:
            call_layer(timed, data)

        hosts, devices = [], []
        try:
            with swapped_helpers(way):
                layer_call()  # warm-up
                torch.cuda.synchronize()
                for _ in range(repeats):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda._sleep(SLEEP_CYCLES)
                    start.record()
                    began = time.perf_counter()
                    layer_call()
                    hosts.append((time.perf_counter() - began) * 1000)
                    end.record()
                    torch.cuda.synchronize()
                    devices.append(start.elapsed_time(end))
        except Exception:  # as in measure(): the other ways still come back
            log.exception("%s failed: left out of the host/device table", way)
            continue
        results.append(HostDevice(way, statistics.median(hosts), statistics.median(devices)))
        log.info("%s: host %.3f ms, device %.3f ms", way, results[-1].host_ms, results[-1].device_ms)
    return results


def host_device_table(results: list[HostDevice], tokens: int, step_tokens: int) -> str:
    """One row per way: host and device milliseconds per layer, the layer's pace (the larger) and what bounds it,
    and the pace scaled to the step (layers x chunks)."""
    chunks = step_tokens / tokens
    lines = [
        f"| way | host (ms) | device (ms) | bound by | pace x {LAYERS} layers x {chunks:.1f} chunks (s) |",
        "|---|---:|---:|---|---:|",
    ]
    for result in results:
        bound = "host" if result.host_ms > result.device_ms else "device"
        pace = max(result.host_ms, result.device_ms) * LAYERS * chunks / 1000
        lines.append(f"| {result.way} | {result.host_ms:.3f} | {result.device_ms:.3f} | {bound} | {pace:.3f} |")
    return "\n".join(lines)


def table(timings: list[Timing], tokens: int, step_tokens: int) -> str:
    by = {(t.projection, t.way): t for t in timings}
    names = list(dict.fromkeys(t.projection for t in timings))
    ways = tuple(way for way in dict.fromkeys(t.way for t in timings) if all((name, way) in by for name in names))
    others = ways[1:]
    header = ["projection", *(f"{way} (ms)" for way in ways), *(f"{way} / peft" for way in others)]
    header += [f"{way} peak (MiB)" for way in ways]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]

    def row(label: str, ms: dict[str, float], peaks: list[str]) -> str:
        cells = [label, *(f"{ms[way]:.3f}" for way in ways), *(f"{ms[way] / ms['peft']:.2f}x" for way in others)]
        return "| " + " | ".join(cells + peaks) + " |"

    for name in names:
        peaks = [f"{by[(name, way)].peak_mib:,.0f}" if by[(name, way)].peak_mib is not None else "-" for way in ways]
        lines.append(row(name, {way: by[(name, way)].milliseconds for way in ways}, peaks))
    layer = {way: sum(by[(name, way)].milliseconds for name in names) for way in ways}
    lines.append(row("one layer", layer, [""] * len(ways)))
    chunks = step_tokens / tokens
    step = {way: layer[way] * LAYERS * chunks / 1000 for way in ways}
    lines.append(row(f"estimate: {LAYERS} layers x {chunks:.1f} chunks (s)", step, [""] * len(ways)))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, default=2100, help="rows per call (the preset's chunk: 2,100)")
    parser.add_argument("--rank", type=int, default=1, help="LoRA rank (the preset's: 1)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--step-tokens", type=int, default=40221, help="training tokens of one preset step (gpu_grpo.py's table)"
    )
    parser.add_argument("--profile", action="store_true", help="kernel tables instead of the timing table")
    parser.add_argument(
        "--host-device", action="store_true", help="GPU only: each way's layer, host time against device time"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(0)
    if args.host_device:
        if args.device != "cuda":
            parser.error("--host-device needs a GPU (a CPU runs its work as it issues it)")
        results = measure_host_device(args.tokens, args.rank, args.repeats)
        print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.tokens} tokens per call")
        print(host_device_table(results, args.tokens, args.step_tokens))
        return
    if args.profile:
        for way, kernels in profile_layer(args.tokens, args.rank, args.repeats, args.device).items():
            print(f"== {way}: one layer x {args.repeats} calls, {args.tokens} tokens per call, LoRA rank {args.rank}")
            print(kernels)
        return
    timings = measure(args.tokens, args.rank, args.repeats, args.device)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, {args.tokens} tokens per call, LoRA rank {args.rank}")
    print(table(timings, args.tokens, args.step_tokens))


if __name__ == "__main__":
    main()
