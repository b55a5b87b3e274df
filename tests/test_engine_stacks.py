"""benchmarks/engine_stacks.py (gpu_inference.py --stack-samples): the sampler started in a process sees what its
other threads run, stops when asked, and its table gives each thread's share of the samples."""

from __future__ import annotations

import threading
import time

import cloudpickle

from tests.benchmark_scripts import load_benchmark


def busy_loop_for_the_sampler(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(200))


def test_the_sampler_sees_another_threads_stack_and_stops() -> None:
    stacks = load_benchmark("engine_stacks")
    assert stacks.stop_sampling(None) == {}  # none running
    assert stacks.start_sampling(None, interval_s=0.002) == "sampling every 2 ms"
    worker = threading.Thread(target=busy_loop_for_the_sampler, args=(0.4,), name="busy")
    worker.start()
    worker.join()
    result = stacks.stop_sampling(None)
    assert result["samples"] >= 20
    busy = sum(n for name, stack, n in result["stacks"] if name == "busy" and any("busy_loop" in f for f in stack))
    assert busy >= 10
    assert not any(thread.name == "stack-sampler" for thread in threading.enumerate())  # stopped, joined
    table = stacks.stack_table(result)
    busy_rows = [line for line in table.splitlines() if line.startswith("| busy |")]
    assert busy_rows and any("test_engine_stacks.py:busy_loop_for_the_sampler" in row for row in busy_rows)
    assert stacks.stack_table({}) == "no stack samples"


def test_copies_sent_by_value_share_the_sampler_of_their_process() -> None:
    """As gpu_inference.py sends them to vLLM's worker: pickled by value, start and stop each a copy of its own."""
    stacks = load_benchmark("engine_stacks")
    cloudpickle.register_pickle_by_value(stacks)
    try:
        start = cloudpickle.loads(cloudpickle.dumps(stacks.start_sampling))
        stop = cloudpickle.loads(cloudpickle.dumps(stacks.stop_sampling))
    finally:
        cloudpickle.unregister_pickle_by_value(stacks)
    assert start.__globals__ is not stop.__globals__
    start(None, interval_s=0.002)
    # waiting, not computing: a busy loop here held the interpreter lock against the sampler, which then took one
    # sample in 0.1 s on a loaded 2-core machine
    time.sleep(0.5)
    assert stop(None)["samples"] >= 5


def test_each_threads_cpu_time_tells_working_from_waiting() -> None:
    """The ``cpu`` rows: a thread that computes uses about its wall time in CPU, one that waits (as a thread blocked on
    the GPU or a lock does) almost none; both still running when the sampler stops."""
    stacks = load_benchmark("engine_stacks")
    stop = threading.Event()

    def compute() -> None:
        while not stop.is_set():
            sum(range(200))

    workers = [threading.Thread(target=compute, name="computes"), threading.Thread(target=stop.wait, name="waits")]
    for worker in workers:
        worker.start()
    try:
        stacks.start_sampling(None, interval_s=0.002)
        time.sleep(0.6)
        result = stacks.stop_sampling(None)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    cpu = {row["thread"]: row for row in result["cpu"]}
    assert cpu["computes"]["wall_s"] >= 0.5 and cpu["computes"]["cpu_s"] >= 0.2
    assert cpu["waits"]["cpu_s"] <= 0.05
    table = stacks.stack_table(result)
    assert "| thread | CPU (s) | wall (s) | CPU / wall |" in table
    assert any(line.startswith("| waits | 0.0") for line in table.splitlines())
