"""ARC tasks: train pairs with known outputs, test pairs whose outputs are the ground truth.

One task is one row of a tasks parquet (schema ``TASKS_SCHEMA`` in :mod:`arc_pipeline.schemas`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arc_pipeline.domain.grids import Grid, as_grid, grids_to_lists


@dataclass(frozen=True)
class Pair:
    input: Grid
    output: Grid | None  # None for a test pair whose solution is unknown


@dataclass(frozen=True)
class Task:
    task_id: str
    train: tuple[Pair, ...]
    test: tuple[Pair, ...]
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def train_inputs(self) -> list[Grid]:
        return [pair.input for pair in self.train]

    @property
    def train_outputs(self) -> list[Grid]:
        return [pair.output for pair in self.train]

    @property
    def test_inputs(self) -> list[Grid]:
        return [pair.input for pair in self.test]

    @property
    def test_outputs(self) -> list[Grid | None]:
        return [pair.output for pair in self.test]

    def to_row(self) -> dict[str, Any]:
        """A dict matching ``TASKS_SCHEMA``."""
        test_outputs = self.test_outputs
        return {
            "task_id": self.task_id,
            "source": self.source,
            "train_inputs": grids_to_lists(self.train_inputs),
            "train_outputs": grids_to_lists(self.train_outputs),
            "test_inputs": grids_to_lists(self.test_inputs),
            "test_outputs": None if any(grid is None for grid in test_outputs) else grids_to_lists(test_outputs),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Task:
        """Inverse of :meth:`to_row`; raises GridError naming nothing: callers add the task id."""
        train = tuple(
            Pair(as_grid(i), as_grid(o)) for i, o in zip(row["train_inputs"], row["train_outputs"], strict=True)
        )
        test_outputs = row.get("test_outputs")
        if test_outputs is None:
            test = tuple(Pair(as_grid(i), None) for i in row["test_inputs"])
        else:
            test = tuple(Pair(as_grid(i), as_grid(o)) for i, o in zip(row["test_inputs"], test_outputs, strict=True))
        return cls(task_id=row["task_id"], train=train, test=test, source=row.get("source") or "")

    @classmethod
    def from_arc_json(
        cls, task_id: str, challenge: dict[str, Any], solutions: list[Any] | None = None, source: str = ""
    ) -> Task:
        """From the ARC JSON format: ``{"train": [{"input", "output"}], "test": [{"input"}]}``."""
        train = tuple(Pair(as_grid(p["input"]), as_grid(p["output"])) for p in challenge["train"])
        test = []
        for index, pair in enumerate(challenge["test"]):
            output = pair.get("output")
            if solutions is not None:
                output = solutions[index]
            test.append(Pair(as_grid(pair["input"]), None if output is None else as_grid(output)))
        return cls(task_id=task_id, train=train, test=tuple(test), source=source)
