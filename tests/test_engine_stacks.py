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
    busy_loop_for_the_sampler(0.1)
    assert stop(None)["samples"] >= 5
