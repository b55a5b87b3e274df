"""Per-prediction scores of one partition (train or test) of a task (docs/scoring.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arc_pipeline.domain.grids import Grid
from arc_pipeline.scoring.similarity import pixel_similarity


@dataclass(frozen=True)
class PartitionScores:
    """``pixel_score``: mean similarity; ``correct_grids``: share exactly right; ``is_correct``: all right."""

    pixel_score: float
    correct_grids: float
    is_correct: bool

    def to_row(self, partition: str) -> dict[str, float | bool]:
        return {
            f"{partition}_pixel_score": self.pixel_score,
            f"{partition}_correct_grids": self.correct_grids,
            f"{partition}_is_correct": self.is_correct,
        }


def empty_row(partition: str) -> dict[str, None]:
    """The null scores of a failed prediction, or of a test partition with unknown solutions."""
    return {f"{partition}_pixel_score": None, f"{partition}_correct_grids": None, f"{partition}_is_correct": None}


def similarities(outputs: Sequence[Grid], truths: Sequence[Grid]) -> list[float]:
    if len(outputs) != len(truths):
        raise ValueError(f"{len(outputs)} output grids for {len(truths)} expected grids")
    return [pixel_similarity(output, truth) for output, truth in zip(outputs, truths)]


def partition_scores(outputs: Sequence[Grid], truths: Sequence[Grid | None] | None) -> PartitionScores | None:
    """Scores of ``outputs`` against ``truths``; None when the truths are unknown (or there are none)."""
    if truths is None or len(truths) == 0 or any(truth is None for truth in truths):
        return None
    values = similarities(outputs, truths)
    n_correct = sum(value == 1.0 for value in values)
    return PartitionScores(
        pixel_score=sum(values) / len(values),
        correct_grids=n_correct / len(values),
        is_correct=n_correct == len(values),
    )
