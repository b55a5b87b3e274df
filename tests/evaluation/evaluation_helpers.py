"""A hand-made evaluation: 2 tasks, n_eval = 4 baseline predictions (n = 2: rounds 0 and 1, so the
first half is round 0) and two refiners with K = 2 prompts x n = 2 refinements per task.

Task A: r0/s0 wrong (fp a1: train 0.5/0.5, test 0.5/0), r0/s1 TimeoutException, r1/s0 right on train
and test (a2), r1/s1 no code (ParsingCodeFailed).
Task B: r0/s0 and r0/s1 wrong with the same output (b1: train 0.25/0, test 0/0), r1/s0 wrong on train
(0.75/0.5) but right on test (b2), r1/s1 ZeroDivisionError.
Refiner "rl": A: two right (ra1), a timeout, one half right (ra2); B: one right (rb1), three UnsafeCode.
Refiner "base": A: four copies of a1; B: four without code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import write_table
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, TASKS_SCHEMA, TRAINING_METRICS_SCHEMA
from arc_pipeline.scoring.execution import executions_frame
from tests.prediction_rows import prediction_row

N_EVAL = 4
N = 2
K = 2
TEXT = "Recolor.\n```python\ndef transform(input_grid):\n    return input_grid\n```"

# task A: recolour 1 -> 2; task B: recolour 3 -> 4 (2 train pairs, 1 test pair each)
TRUTH = {
    "A": {
        "train": [[[1, 0], [0, 0]], [[0, 1], [0, 0]]],
        "train_out": [[[2, 0], [0, 0]], [[0, 2], [0, 0]]],
        "test": [[[1, 1], [0, 0]]],
        "test_out": [[[2, 2], [0, 0]]],
    },
    "B": {
        "train": [[[3, 0, 0]], [[0, 3, 0]]],
        "train_out": [[[4, 0, 0]], [[0, 4, 0]]],
        "test": [[[3, 3, 3]]],
        "test_out": [[[4, 4, 4]]],
    },
}
WRONG = [[9]]


def grid(rows) -> np.ndarray:
    return np.array(rows, dtype=np.int8)


def tasks() -> list[Task]:
    out = []
    for task_id, t in TRUTH.items():
        out.append(
            Task(
                task_id,
                train=tuple(Pair(grid(i), grid(o)) for i, o in zip(t["train"], t["train_out"])),
                test=tuple(Pair(grid(i), grid(o)) for i, o in zip(t["test"], t["test_out"])),
                source="test",
            )
        )
    return out


def prediction(task_id: str, turn: int, round_: int, sample: int, parent: str | None = None) -> dict:
    fields = {"turn": turn, "round": round_, "sample_index": sample, "parent_prediction_id": parent}
    return prediction_row(task_id, TEXT, **fields, max_tokens=64)  # un-augmented


def execution(
    prediction_id: str,
    *,
    error: str | None = None,
    has_code: bool = True,
    fp: str | None = None,
    train: tuple | None = None,
    test: tuple | None = None,
) -> dict:
    """train/test: (pixel_score, correct_grids) -- is_correct follows from correct_grids == 1; the
    outputs are the truth where a grid is right and WRONG elsewhere (1 train grid right at 0.5)."""
    task_id = prediction_id.split("/")[0]
    turn = int(prediction_id.split("/")[1][1:])
    valid = error is None
    truth = TRUTH[task_id]
    if valid:
        right_train = round(train[1] * len(truth["train_out"]))
        train_outputs = [g if i < right_train else WRONG for i, g in enumerate(truth["train_out"])]
        test_outputs = [g if test[1] == 1 else WRONG for g in truth["test_out"]]
    return {
        "prediction_id": prediction_id,
        "task_id": task_id,
        "turn": turn,
        "has_code": has_code,
        "error_type": error,
        "error_message": None if valid else f"{error}: it failed",
        "train_outputs": train_outputs if valid else None,
        "test_outputs": test_outputs if valid else None,
        "fingerprint": fp if valid else None,
        "train_pixel_score": train[0] if valid else None,
        "train_correct_grids": train[1] if valid else None,
        "train_is_correct": (train[1] == 1) if valid else None,
        "test_pixel_score": test[0] if valid else None,
        "test_correct_grids": test[1] if valid else None,
        "test_is_correct": (test[1] == 1) if valid else None,
        "duration_s": 0.01,
    }


def baseline_predictions() -> pl.DataFrame:
    rows = [prediction(t, 1, r, s) for t in ("A", "B") for r in range(2) for s in range(N)]
    return _frame(rows, PREDICTIONS_SCHEMA)


def prediction_frame(rows: list[dict]) -> pl.DataFrame:
    return _frame(rows, PREDICTIONS_SCHEMA)


def _frame(rows: list[dict], schema) -> pl.DataFrame:
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=schema))


def baseline_executions() -> pl.DataFrame:
    return executions_frame(
        [
            execution("A/t1/r0/s0", fp="a1", train=(0.5, 0.5), test=(0.5, 0.0)),
            execution("A/t1/r0/s1", error="TimeoutException"),
            execution("A/t1/r1/s0", fp="a2", train=(1.0, 1.0), test=(1.0, 1.0)),
            execution("A/t1/r1/s1", error="ParsingCodeFailed", has_code=False),
            execution("B/t1/r0/s0", fp="b1", train=(0.25, 0.0), test=(0.0, 0.0)),
            execution("B/t1/r0/s1", fp="b1", train=(0.25, 0.0), test=(0.0, 0.0)),
            execution("B/t1/r1/s0", fp="b2", train=(0.75, 0.5), test=(1.0, 1.0)),
            execution("B/t1/r1/s1", error="ZeroDivisionError"),
        ]
    )


# the refined (parent) prediction of each task: its best wrong first-half prediction
PARENTS = {"A": "A/t1/r0/s0", "B": "B/t1/r0/s0"}


def refinement_predictions() -> pl.DataFrame:
    rows = [prediction(t, 2, r, s, parent=PARENTS[t]) for t in ("A", "B") for r in range(K) for s in range(N)]
    return _frame(rows, PREDICTIONS_SCHEMA)


def rl_executions() -> pl.DataFrame:
    return executions_frame(
        [
            execution("A/t2/r0/s0", fp="ra1", train=(1.0, 1.0), test=(1.0, 1.0)),
            execution("A/t2/r0/s1", fp="ra1", train=(1.0, 1.0), test=(1.0, 1.0)),
            execution("A/t2/r1/s0", error="TimeoutException"),
            execution("A/t2/r1/s1", fp="ra2", train=(0.5, 0.5), test=(0.5, 0.0)),
            execution("B/t2/r0/s0", fp="rb1", train=(1.0, 1.0), test=(1.0, 1.0)),
            execution("B/t2/r0/s1", error="UnsafeCode"),
            execution("B/t2/r1/s0", error="UnsafeCode"),
            execution("B/t2/r1/s1", error="UnsafeCode"),
        ]
    )


def base_executions() -> pl.DataFrame:
    return executions_frame(
        [execution(f"A/t2/r{r}/s{s}", fp="a1", train=(0.5, 0.5), test=(0.5, 0.0)) for r in range(K) for s in range(N)]
        + [execution(f"B/t2/r{r}/s{s}", error="ParsingCodeFailed", has_code=False) for r in range(K) for s in range(N)]
    )


def training_metrics() -> list[dict]:
    rows = []
    for step in range(1, 6):
        for name, value in (
            ("reward", 1.0 + 0.5 * step),
            ("completions/clipped_ratio", 0.1 * step),
            ("completions/mean_length", 100.0 + 10 * step),
            ("entropy", 0.5 - 0.05 * step),
            ("arc/solved_share", 0.02 * step),
        ):
            rows.append({"step": step, "epoch": step / 5, "name": name, "value": value})
    return rows


def write_inputs(folder: Path) -> dict[str, Path]:
    """Every input of the evaluate stage as parquet files in ``folder``."""
    paths = {
        "tasks": folder / "tasks.parquet",
        "baseline_predictions": folder / "baseline" / "predictions.parquet",
        "baseline": folder / "baseline" / "executions.parquet",
        "base_predictions": folder / "refine_base" / "predictions.parquet",
        "base": folder / "refine_base" / "executions.parquet",
        "rl_predictions": folder / "refine_rl" / "predictions.parquet",
        "rl": folder / "refine_rl" / "executions.parquet",
        "training_metrics": folder / "train" / "metrics.parquet",
    }
    write_table([task.to_row() for task in tasks()], paths["tasks"], TASKS_SCHEMA)
    write_table(baseline_predictions(), paths["baseline_predictions"], PREDICTIONS_SCHEMA)
    write_table(baseline_executions(), paths["baseline"], EXECUTIONS_SCHEMA)
    write_table(refinement_predictions(), paths["base_predictions"], PREDICTIONS_SCHEMA)
    write_table(base_executions(), paths["base"], EXECUTIONS_SCHEMA)
    write_table(refinement_predictions(), paths["rl_predictions"], PREDICTIONS_SCHEMA)
    write_table(rl_executions(), paths["rl"], EXECUTIONS_SCHEMA)
    write_table(training_metrics(), paths["training_metrics"], TRAINING_METRICS_SCHEMA)
    return paths
