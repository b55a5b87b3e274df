"""Hand-built executions rows shared by the table, voting and pass@k tests.

Task A (test known), 5 predictions: a1 solves train and test; a2 half right; a3 times out; a4 has
no code; a5 wrong on train but right on test (same fingerprint as a2). Task B (test known): b1
right on test only, b2 right on train only. Task C (test unknown): c1 valid, c2 ZeroDivisionError.
"""

from __future__ import annotations

import polars as pl

from arc_pipeline.scoring.execution import executions_frame

G1 = [[1, 2], [3, 4]]
G2 = [[5]]


def row(
    prediction_id,
    task_id,
    *,
    has_code=True,
    error=None,
    fp=None,
    train=None,
    test=None,
    train_outputs=None,
    test_outputs=None,
    message=None,
):
    """train/test: (pixel_score, correct_grids, is_correct) or None."""
    valid = error is None
    train = train if valid else None
    test = test if valid else None
    return {
        "prediction_id": prediction_id,
        "task_id": task_id,
        "turn": 1,
        "has_code": has_code,
        "error_type": error,
        "error_message": message if message is not None else (None if valid else f"{error} happened"),
        "train_outputs": (train_outputs or [G1]) if valid else None,
        "test_outputs": (test_outputs or [G2]) if valid else None,
        "fingerprint": fp if valid else None,
        "train_pixel_score": train[0] if train else None,
        "train_correct_grids": train[1] if train else None,
        "train_is_correct": train[2] if train else None,
        "test_pixel_score": test[0] if test else None,
        "test_correct_grids": test[1] if test else None,
        "test_is_correct": test[2] if test else None,
        "duration_s": 0.01,
    }


def fixture_executions() -> pl.DataFrame:
    rows = [
        row("A/1", "A", fp="f1", train=(1.0, 1.0, True), test=(1.0, 1.0, True)),
        row("A/2", "A", fp="f2", train=(0.75, 0.5, False), test=(0.5, 0.0, False)),
        row("A/3", "A", error="TimeoutException"),
        row("A/4", "A", has_code=False, error="ParsingCodeFailed"),
        row("A/5", "A", fp="f2", train=(0.25, 0.0, False), test=(1.0, 1.0, True)),
        row("B/1", "B", fp="g1", train=(0.5, 0.0, False), test=(1.0, 1.0, True)),
        row("B/2", "B", fp="g2", train=(1.0, 1.0, True), test=(0.2, 0.0, False)),
        row("C/1", "C", fp="h1", train=(0.5, 0.5, False), test=None),
        row(
            "C/2",
            "C",
            error="ZeroDivisionError",
            message="Traceback (most recent call last):\n  File x\nZeroDivisionError: division by zero\n",
        ),
    ]
    return executions_frame(rows)


TEST_KNOWN = {"A": True, "B": True, "C": False}
