"""Worker pool behaviour: replacement after a crash, determinism across pool sizes, batches go on."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import numpy as np
import pytest
from sandbox_helpers import GRID, assert_healthy, ok_outputs

from arc_pipeline.sandbox import Sandbox, SandboxConfig
from arc_pipeline.sandbox import worker as worker_module

MIXED_BATCH = [
    ("def transform(g):\n    return g[::-1]", [GRID, np.array([[1, 2]])]),
    ("import random\ndef transform(g):\n    return np.array([[random.randint(0, 9) for _ in range(5)]])", [GRID]),
    (
        (
            "def transform(g):\n    s = {'alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'}\n"
            "    return np.array([[len(w) for w in s]])"
        ),
        [GRID],
    ),
    ("def transform(g):\n    return np.random.permutation(10).reshape(2, 5)", [GRID]),
    ("def transform(g):\n    raise KeyError('k')", [GRID]),
    ("syntax error here", [GRID]),
    ("def transform(g):\n    while True:\n        pass", [GRID]),
    ("import os\ndef transform(g):\n    os.system('true')", [GRID]),
    ("def transform(g):\n    return (g + 1) % 10", [GRID, GRID.T]),
] * 2


def _summary(results):
    return [(r.error_type, None if r.outputs is None else [o.tolist() for o in r.outputs]) for r in results]


def test_identical_results_with_one_and_two_workers():
    config = dict(timeout_s=0.3, memory_mb=512)
    with Sandbox(SandboxConfig(workers=1, **config)) as one:
        first = one.run_many(MIXED_BATCH)
    with Sandbox(SandboxConfig(workers=2, **config)) as two:
        second = two.run_many(iter(MIXED_BATCH), progress=True)
    assert _summary(first) == _summary(second)
    assert [r.error_type for r in first[:9]] == [
        None,
        None,
        None,
        None,
        "KeyError",
        "SyntaxError",
        "TimeoutException",
        "UnsafeCode",
        None,
    ]


def test_batch_goes_on_after_failures_and_keeps_order(sandbox):
    jobs = []
    for i in range(12):
        if i % 3 == 0:
            jobs.append(("def transform(g):\n    raise ValueError()", [GRID]))
        else:
            jobs.append((f"def transform(g):\n    return np.full((1, 1), {i % 10})", [GRID]))
    results = sandbox.run_many(jobs)
    for i, result in enumerate(results):
        if i % 3 == 0:
            assert result.error_type == "ValueError"
        else:
            assert ok_outputs(result) == [[[i % 10]]]


def test_time_limit_covers_all_inputs_together():
    with Sandbox(SandboxConfig(workers=1, timeout_s=0.5, memory_mb=512)) as box:
        slow = "import time\ndef transform(g):\n    time.sleep(0.2)\n    return g"
        assert box.run(slow, [GRID, GRID]).error_type is None
        result = box.run(slow, [GRID] * 4)
        assert result.error_type == "TimeoutException" and result.outputs is None
        assert 0.45 < result.duration_s < 1.5


def test_killed_worker_is_replaced_and_the_batch_goes_on():
    with Sandbox(SandboxConfig(workers=1, timeout_s=2.0, memory_mb=512)) as box:
        worker_pid = box._workers[0].process.pid

        def kill_worker():
            time.sleep(0.3)
            os.kill(worker_pid, signal.SIGKILL)

        killer = threading.Thread(target=kill_worker)
        killer.start()
        jobs = [("import time\ndef transform(g):\n    time.sleep(1.5)\n    return g", [GRID])]
        jobs += [("def transform(g):\n    return g", [GRID])] * 3
        results = box.run_many(jobs)
        killer.join()
        assert results[0].error_type == "WorkerCrashed"
        assert all(ok_outputs(r) == [GRID.tolist()] for r in results[1:])
        assert box._workers[0].process.pid != worker_pid
        assert_healthy(box)


def test_dead_worker_is_restarted_before_the_next_program():
    with Sandbox(SandboxConfig(workers=1, timeout_s=1.0, memory_mb=512)) as box:
        box._workers[0].process.kill()
        box._workers[0].process.wait()
        assert ok_outputs(box.run("def transform(g):\n    return g", [GRID])) == [GRID.tolist()]


def test_wedged_worker_is_replaced(monkeypatch):
    monkeypatch.setattr(worker_module, "REPLY_GRACE_S", 0.5)
    with Sandbox(SandboxConfig(workers=1, timeout_s=0.3, memory_mb=512)) as box:
        os.kill(box._workers[0].process.pid, signal.SIGSTOP)
        started = time.monotonic()
        result = box.run("def transform(g):\n    return g", [GRID])
        assert result.error_type == "WorkerCrashed"
        assert time.monotonic() - started < 5
        assert_healthy(box)


def test_close_kills_workers_and_reports_mechanisms():
    box = Sandbox(SandboxConfig(workers=2, memory_mb=512))
    pids = [worker.process.pid for worker in box._workers]
    assert "seccomp" in box.mechanisms and "landlock" in box.mechanisms
    box.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="workers"):
        SandboxConfig(workers=0)
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxConfig(timeout_s=0)


def test_max_output_side_is_the_configured_one():
    """35 a side comes back only from a sandbox configured for it (the published rules); 36 never does."""
    code = "def transform(g):\n    return np.full((g[0, 0], g[0, 0]), 3)"
    sides = [np.array([[30]]), np.array([[33]]), np.array([[35]])]
    with Sandbox(SandboxConfig(workers=1, timeout_s=2.0, memory_mb=512)) as box:
        assert box.run(code, sides[:1]).outputs[0].shape == (30, 30)
        result = box.run(code, sides[1:2])
        assert result.error_type == "InvalidOutput" and "exceeds 30 x 30" in result.error_message
    with Sandbox(SandboxConfig(workers=1, timeout_s=2.0, memory_mb=512, max_output_side=35)) as box:
        assert [o.shape for o in box.run(code, sides).outputs] == [(30, 30), (33, 33), (35, 35)]
        assert box.run(code, [np.array([[36]])]).error_type == "InvalidOutput"


def test_a_global_socket_timeout_in_the_pipeline_does_not_break_the_workers():
    """Libraries in the training process (unsloth's import, seen on the GPU) may call
    socket.setdefaulttimeout: sockets made afterwards are non-blocking underneath, and the worker's end of the
    control socket used to inherit that, so its first wait for a job raised EAGAIN and the worker died."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(2.0)
    try:
        with Sandbox(SandboxConfig(workers=1, timeout_s=0.5, memory_mb=512)) as box:
            time.sleep(0.5)  # the worker waits for its first job
            results = [box.run("def transform(g):\n    return g[::-1]", [GRID]) for _ in range(3)]
            assert [ok_outputs(result) for result in results] == [[GRID[::-1].tolist()]] * 3
            assert_healthy(box)
    finally:
        socket.setdefaulttimeout(previous)
