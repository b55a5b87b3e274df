"""kill -9 of the execute stage: no process it started outlives it.

Its scoring pool's workers wait on a queue whose both ends they hold, so before they got a parent-death
signal (process_tree.die_with_parent) they waited forever after a SIGKILL of the stage, and kept the
stage's log pipe (and so its ``tee``) open with them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import psutil

from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import write_table
from arc_pipeline.schemas import PREDICTIONS_SCHEMA, TASKS_SCHEMA
from tests.prediction_rows import prediction_row, predictions_table

SLOW_IDENTITY = "```python\nimport time\ndef transform(g):\n    time.sleep(0.2)\n    return g\n```"


def write_inputs(folder, n: int) -> None:
    grid = np.array([[1, 0], [0, 2]], dtype=np.int8)
    task = Task("t", train=(Pair(grid, grid),), test=(Pair(grid, grid),), source="test")
    write_table([task.to_row()], folder / "tasks.parquet", TASKS_SCHEMA)
    rows = [prediction_row("t", SLOW_IDENTITY, sample_index=index, train_order=[0]) for index in range(n)]
    write_table(predictions_table(rows), folder / "predictions.parquet", PREDICTIONS_SCHEMA)


def spawned_children(pid: int) -> list[psutil.Process]:
    """The process's descendants started by multiprocessing's spawn (the scoring pool's workers)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "multiprocessing.spawn" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:  # a short-lived child (a sandbox helper) ended, or is a zombie, as we looked
            continue
    return found


def test_no_scoring_worker_outlives_a_killed_execute_stage(tmp_path):
    write_inputs(tmp_path, 40)
    config = {"workers": 1, "timeout_s": 2.0, "chunk_size": 2, "scoring_workers": 1, "progress": False}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "arc_pipeline.cli", "--log-file", str(out / "execute.log"), "execute"]
    for option, name in [("--predictions", "predictions.parquet"), ("--tasks", "tasks.parquet")]:
        command += [option, str(tmp_path / name)]
    for option in ("executions", "metrics", "metrics-md", "errors", "errors-md"):
        command += [f"--{option}", str(out / option)]
    stage = subprocess.Popen([*command, "--config-json", json.dumps(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    pool: list[psutil.Process] = []
    while not pool:  # the pool starts with the first chunk's scoring
        assert stage.poll() is None and time.monotonic() < deadline, "the stage ended before its pool started"
        pool = spawned_children(stage.pid)
        time.sleep(0.05)
    stage.send_signal(signal.SIGKILL)
    stage.wait()
    _, alive = psutil.wait_procs(pool, timeout=10)
    for process in alive:
        process.kill()
    assert alive == [], "scoring workers outlived the killed stage"
