"""Programs that flood their record pipe (issue 23): each ends as that program's InvalidOutput.

Before the fix, one such program ended the whole execute stage (and a GRPO training job) with
``ProtocolError: unknown reply status 3``. Each flood runs for real in both sandbox layers (with the
audit hook, and with the kernel's enforcement alone), through ``Sandbox.run`` and ``run_many``, through
the execute path (``execute_predictions`` and the ``arc-pipeline execute`` stage) and through the GRPO
reward (``ArcReward.score``).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from sandbox_helpers import GRID, PROBE, PROBE_EXPECTED, assert_healthy

from arc_pipeline.cli import main as cli_main
from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, TASKS_SCHEMA
from tests.prediction_rows import prediction_row, predictions_table

# The process's FIFOs: the only one left to a program is its record pipe (docs/sandbox.md), but an
# attacker does not need to know which.
_FIFOS = (
    "import os, stat, struct, threading\n"
    "def fifos():\n"
    "    found = []\n"
    "    for fd in range(64):\n"
    "        try:\n"
    "            if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
    "                found.append(fd)\n"
    "        except OSError:\n"
    "            pass\n"
    "    return found\n"
    "def flood(fds, data, times):\n"
    "    for _ in range(times):\n"
    "        for fd in fds:\n"
    "            try:\n"
    "                os.write(fd, data)\n"
    "            except OSError:\n"
    "                pass\n"
)

FLOODS = {
    # one writer, a record's limit many times over
    "one writer": _FIFOS + "def transform(g):\n    flood(fifos(), b'O' * 65536, 20)\n    return g\n",
    # eight threads writing short forged (individually valid) records at once
    "threaded writers": _FIFOS + "def transform(g):\n"
    "    forged = b'O' + struct.pack('<H', 1) + bytes([1, 1, 3])\n"
    "    fds = fifos()\n"
    "    threads = [threading.Thread(target=flood, args=(fds, forged, 3000)) for _ in range(8)]\n"
    "    for thread in threads:\n"
    "        thread.start()\n"
    "    for thread in threads:\n"
    "        thread.join()\n"
    "    return g\n",
    "flood then exit": _FIFOS + "def transform(g):\n    flood(fifos(), b'O' * 65536, 3)\n    os._exit(0)\n",
    "flood then spin": _FIFOS
    + "def transform(g):\n    flood(fifos(), b'E' * 65536, 3)\n    while True:\n        pass\n",
}


def assert_flood_result(result) -> None:
    assert result.outputs is None
    assert result.error_type == "InvalidOutput", (result.error_type, result.error_message)
    assert "wrote more than" in result.error_message


@pytest.mark.parametrize("name", sorted(FLOODS))
def test_a_flood_is_the_programs_invalid_output(hostile_sandbox, name):
    assert_flood_result(hostile_sandbox.run(FLOODS[name], [GRID]))
    assert_healthy(hostile_sandbox)


def test_floods_among_other_programs_in_run_many(hostile_sandbox):
    names = sorted(FLOODS)
    jobs = [(PROBE, [GRID])] + [(FLOODS[name], [GRID]) for name in names] + [(PROBE, [GRID])]
    results = hostile_sandbox.run_many(jobs)
    assert len(results) == len(jobs)
    for result in results[1:-1]:
        assert_flood_result(result)
    for result in (results[0], results[-1]):
        assert result.error_type is None and result.outputs[0].tolist() == PROBE_EXPECTED


# --- the execute path ----------------------------------------------------------------------------------


def _grid(rows) -> np.ndarray:
    return np.array(rows, dtype=np.int8)


TASK = Task(
    "flooded",
    train=(Pair(_grid([[1, 0], [0, 0]]), _grid([[1, 0], [0, 0]])), Pair(_grid([[0, 2]]), _grid([[0, 2]]))),
    test=(Pair(_grid([[3, 3], [0, 1]]), _grid([[3, 3], [0, 1]])),),
    source="test",
)
IDENTITY = "def transform(g):\n    return g\n"


def completion(code: str) -> str:
    return f"Here is my answer.\n```python\n{code}```\n"


def predictions_frame(texts: list[str]) -> pl.DataFrame:
    rows = [
        prediction_row(TASK.task_id, text, prediction_id=f"flooded/t1/r0/s{index}", sample_index=index)
        for index, text in enumerate(texts)
    ]
    return pl.from_arrow(predictions_table(rows))


TEXTS = [completion(IDENTITY)] + [completion(FLOODS[name]) for name in sorted(FLOODS)]


def check_executions(executions: pl.DataFrame) -> None:
    rows = executions.to_dicts()  # in the predictions' order
    assert len(rows) == len(TEXTS)
    assert rows[0]["error_type"] is None and rows[0]["train_is_correct"] and rows[0]["test_is_correct"]
    for row in rows[1:]:
        assert row["error_type"] == "InvalidOutput" and row["has_code"], row
        assert row["train_outputs"] is None and row["train_pixel_score"] is None


def test_execute_predictions_survives_the_floods(hostile_sandbox):
    from arc_pipeline.scoring.execution import execute_predictions

    executions = execute_predictions(predictions_frame(TEXTS), {TASK.task_id: TASK}, hostile_sandbox, progress=False)
    check_executions(executions)


def test_the_execute_stage_survives_the_floods(tmp_path):
    """The stage itself (its own sandbox, audit hook on as in production), chunked as it runs."""
    write_table(predictions_frame(TEXTS), tmp_path / "predictions.parquet", PREDICTIONS_SCHEMA)
    write_table([TASK.to_row()], tmp_path / "tasks.parquet", TASKS_SCHEMA)
    out = tmp_path / "out"
    config = {"workers": 1, "timeout_s": 0.5, "chunk_size": 2, "progress": False, "scoring_workers": 0}
    status = cli_main(
        [
            "execute",
            "--predictions",
            str(tmp_path / "predictions.parquet"),
            "--tasks",
            str(tmp_path / "tasks.parquet"),
            "--executions",
            str(out / "executions.parquet"),
            "--metrics",
            str(out / "metrics.parquet"),
            "--metrics-md",
            str(out / "metrics.md"),
            "--errors",
            str(out / "errors.parquet"),
            "--errors-md",
            str(out / "errors.md"),
            "--config-json",
            json.dumps(config),
        ]
    )
    assert status == 0
    check_executions(read_frame(out / "executions.parquet", EXECUTIONS_SCHEMA))
    errors = read_frame(out / "errors.parquet")
    assert errors["InvalidOutput"].to_list()[0] == pytest.approx((len(TEXTS) - 1) / len(TEXTS))


# --- the GRPO reward ---------------------------------------------------------------------------------------


def test_the_grpo_reward_survives_the_floods(hostile_sandbox):
    from arc_pipeline.training.rewards import ArcReward

    reward = ArcReward("arc-v2-no-pixel-score", hostile_sandbox, stop_token_ids=[2])
    n = len(TEXTS)

    def grids(value):  # the task's grids, repeated for every completion as TRL passes dataset columns
        return [[grid.tolist() for grid in value]] * n

    outcomes = reward.score(
        TEXTS,
        grids(TASK.train_inputs),
        grids(TASK.train_outputs),
        grids(TASK.test_inputs),
        grids(TASK.test_outputs),
        completion_ids=[[5, 2]] * n,
    )
    assert [outcome.error_type for outcome in outcomes] == [None] + ["InvalidOutput"] * (n - 1)
    assert outcomes[0].reward > max(outcome.reward for outcome in outcomes[1:])
