"""Where a process spends its host time: a thread started inside it samples the Python stack of every other thread
of that process at a fixed interval, until asked for the counts. ``gpu_inference.py --stack-samples`` starts it
inside vLLM's engine worker (through ``Engine.apply_model``); ``gpu_grpo.py --stack-samples`` inside a training
process (a trainer callback).

Why: with top-p on, vLLM 0.31 generated for seconds longer than with it off while its top-p kernel was fast
(benchmarks/README.md, sixteenth lease). A profiler records PyTorch calls; this records what each Python thread
is doing, the engine's loop and anything beside it, with no tool to install and no ptrace. It found the answer:
about a fifth of the engine thread's samples in Triton's compiler, the top-p kernels compiling in the timed window
(seventeenth lease). One sample walks every thread's frames under the interpreter lock, so the sampler slows the
run a little: its runs' rates are not figures.

The functions run in the worker: gpu_inference.py sends them pickled by value (``cloudpickle``), so the worker
need not import this module, and each unpickled copy has globals of its own: the sampler's state is kept in a
module of its own in ``sys.modules`` (``STATE_MODULE``), which every copy in one process finds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from collections import Counter
from pathlib import Path
from typing import Any

STATE_MODULE = "arc_pipeline_benchmark_stack_sampler"


def _state() -> dict[str, Any]:
    """The sampler's state in this process, shared by every copy of these functions."""
    module = sys.modules.setdefault(STATE_MODULE, types.ModuleType(STATE_MODULE))
    if not hasattr(module, "sampler"):
        module.sampler = {}
    return module.sampler


def _frames(frame: Any, depth: int) -> tuple[str, ...]:
    """The innermost ``depth`` frames of a stack, innermost first, as ``file:function``."""
    stack = []
    while frame is not None and len(stack) < depth:
        stack.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}")
        frame = frame.f_back
    return tuple(stack)


def thread_cpu_s(native_id: int) -> float | None:
    """CPU seconds (user + system) a thread of this process has used, from Linux's /proc; None where it cannot be
    read (the thread ended, or no /proc)."""
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is the state (field 3 of stat(5)); utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_sampling(model: Any, interval_s: float = 0.005, depth: int = 8) -> str:
    """In the sampled process (``model``, which ``apply_model`` passes, unused): start sampling every other
    thread's stack each ``interval_s``, and note each thread's CPU time when first seen: a thread that uses far less
    CPU than the wall time sampled waits (on the GPU, a lock, the interpreter lock), one near it works on the host."""
    stop_sampling(None)  # a sampler left running by an earlier call
    counts: Counter[tuple[str, tuple[str, ...]]] = Counter()
    first_cpu: dict[int, tuple[str, float, float]] = {}  # native id -> (name, CPU s, monotonic s) when first seen
    stop = threading.Event()
    taken = [0]

    def sample() -> None:
        me = threading.get_ident()
        while not stop.wait(interval_s):
            threads = {thread.ident: thread for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                thread = threads.get(ident)
                name = thread.name if thread is not None else str(ident)
                counts[(name, _frames(frame, depth))] += 1
                native_id = getattr(thread, "native_id", None)
                if native_id is not None and native_id not in first_cpu:
                    cpu = thread_cpu_s(native_id)
                    if cpu is not None:
                        first_cpu[native_id] = (name, cpu, time.monotonic())
            taken[0] += 1

    thread = threading.Thread(target=sample, name="stack-sampler", daemon=True)
    _state().update(thread=thread, stop=stop, counts=counts, taken=taken, interval_s=interval_s, first_cpu=first_cpu)
    thread.start()
    return f"sampling every {interval_s * 1000:g} ms"


def stop_sampling(model: Any, top: int = 400) -> dict[str, Any]:
    """In the sampled process: stop the sampler and return its counts: ``samples`` taken, the ``top`` most frequent
    (thread, stack, count) triples, stacks innermost frame first, and ``cpu``: per thread still alive, the CPU and
    wall seconds since the sampler first saw it ({} if none ran)."""
    sampler = _state()
    if not sampler:
        return {}
    sampler["stop"].set()
    sampler["thread"].join()
    counts, taken = sampler["counts"], sampler["taken"][0]
    now = time.monotonic()
    cpu = []
    for native_id, (name, cpu_then, seen_at) in sampler["first_cpu"].items():
        cpu_now = thread_cpu_s(native_id)
        if cpu_now is not None:
            cpu.append({"thread": name, "cpu_s": round(cpu_now - cpu_then, 2), "wall_s": round(now - seen_at, 2)})
    sampler.clear()
    return {
        "samples": taken,
        "stacks": [(name, list(stack), n) for (name, stack), n in counts.most_common(top)],
        "cpu": cpu,
    }


def stack_table(result: dict[str, Any], rows: int = 12, frames: int = 3) -> str:
    """Per thread, its most frequent innermost ``frames`` frames with their share of the samples, as Markdown."""
    samples = result.get("samples", 0)
    if not samples:
        return "no stack samples"
    per_thread: dict[str, Counter[str]] = {}
    for name, stack, count in result["stacks"]:
        per_thread.setdefault(name, Counter())[" < ".join(stack[:frames])] += count
    header = "| thread | innermost frames (innermost first) | share of samples |"
    lines = [f"{samples} samples", ""]
    if result.get("cpu"):
        lines += ["| thread | CPU (s) | wall (s) | CPU / wall |", "|---|---:|---:|---:|"]
        for row in sorted(result["cpu"], key=lambda row: -row["cpu_s"]):
            share = row["cpu_s"] / row["wall_s"] if row["wall_s"] else 0.0
            lines.append(f"| {row['thread']} | {row['cpu_s']:.2f} | {row['wall_s']:.2f} | {share:.0%} |")
        lines.append("")
    lines += [header, "|---|---|---:|"]
    for name, counts in sorted(per_thread.items(), key=lambda item: -sum(item[1].values())):
        for frames_text, count in counts.most_common(rows):
            lines.append(f"| {name} | {frames_text} | {count / samples:.1%} |")
    return "\n".join(lines)
