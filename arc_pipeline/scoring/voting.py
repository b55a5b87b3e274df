"""Choosing two attempts per test input from many predictions, as the ARC Prize scores on Kaggle.

Per task and test input, the candidate grids are the valid predictions' (un-augmented) outputs for
that input. Attempts are filled in two stages:

1. majority vote among the predictions that solve all train pairs (``train_is_correct``);
2. then majority vote among the other valid predictions, over grids not chosen yet.

Ties are broken deterministically: more votes first, then the higher mean ``train_pixel_score`` of
the grid's voters, then the smallest ``prediction_id`` among its voters. Tasks with fewer distinct
candidates than attempts get fewer attempts (the submission fills the gap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from arc_pipeline.domain.grids import Grid
from arc_pipeline.scoring.fingerprint import fingerprint

N_ATTEMPTS = 2


@dataclass
class _Candidate:
    grid: Grid
    votes: int = 0
    pixel_scores: list[float] = field(default_factory=list)
    first_id: str = ""

    def add(self, prediction_id: str, train_pixel_score: float | None) -> None:
        self.votes += 1
        self.pixel_scores.append(train_pixel_score or 0.0)
        if not self.first_id or prediction_id < self.first_id:
            self.first_id = prediction_id

    def rank_key(self) -> tuple[int, float, str]:
        return (-self.votes, -float(np.mean(self.pixel_scores)), self.first_id)


def _ballot(rows: Sequence[dict], test_index: int) -> dict[str, _Candidate]:
    candidates: dict[str, _Candidate] = {}
    for row in rows:
        grid = np.asarray(row["test_outputs"][test_index], dtype=np.int8)
        key = fingerprint([grid])
        candidates.setdefault(key, _Candidate(grid)).add(row["prediction_id"], row["train_pixel_score"])
    return candidates


def vote_test_input(rows: Sequence[dict], test_index: int, attempts: int = N_ATTEMPTS) -> list[Grid]:
    """Up to ``attempts`` grids for one test input from one task's valid execution rows."""
    train_correct = [row for row in rows if row["train_is_correct"]]
    others = [row for row in rows if not row["train_is_correct"]]
    chosen: dict[str, Grid] = {}
    for group in (train_correct, others):
        ranked = sorted(_ballot(group, test_index).items(), key=lambda item: item[1].rank_key())
        for key, candidate in ranked:
            if len(chosen) == attempts:
                break
            chosen.setdefault(key, candidate.grid)
    return list(chosen.values())


VOTE_COLUMNS = ("task_id", "prediction_id", "error_type", "test_outputs", "train_is_correct", "train_pixel_score")


def vote(executions: pl.DataFrame, attempts: int = N_ATTEMPTS) -> dict[str, list[list[Grid]]]:
    """``{task_id: [attempts for test input 0, ...]}`` for every task with at least one valid prediction."""
    valid = executions.select(VOTE_COLUMNS).filter(
        pl.col("error_type").is_null() & pl.col("test_outputs").is_not_null()
    )
    result: dict[str, list[list[Grid]]] = {}
    for (task_id,), group in valid.group_by("task_id", maintain_order=True):
        rows = group.to_dicts()
        n_test = len(rows[0]["test_outputs"])
        result[task_id] = [vote_test_input(rows, index, attempts) for index in range(n_test)]
    return result
