"""Task augmentation (docs/prompts.md): a dihedral transform plus a colour permutation.

Forward: flip columns (if ``hflip``), then ``numpy.rot90`` ``rot90_k`` times, then map colours with
``color_map`` (``color_map[original] = augmented``). Undo: inverse colour map, rotate by ``-rot90_k``,
then flip. Every prediction records these three parameters so it can be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arc_pipeline.domain.grids import Grid
from arc_pipeline.domain.tasks import Pair, Task

FULL_PERMUTATION_PROBABILITY = 0.1  # otherwise black (the background) stays black


@dataclass(frozen=True)
class Augmentation:
    hflip: bool
    rot90_k: int
    color_map: tuple[int, ...]  # length 10

    def __post_init__(self) -> None:
        if not 0 <= self.rot90_k <= 3:
            raise ValueError(f"rot90_k must be in 0..3, got {self.rot90_k}")
        if sorted(self.color_map) != list(range(10)):
            raise ValueError(f"color_map must be a permutation of 0..9, got {self.color_map}")

    @classmethod
    def identity(cls) -> Augmentation:
        return cls(False, 0, tuple(range(10)))

    @classmethod
    def random(cls, rng: np.random.Generator) -> Augmentation:
        hflip = bool(rng.integers(2))
        rot90_k = int(rng.integers(4))
        if rng.random() < FULL_PERMUTATION_PROBABILITY:
            color_map = tuple(int(c) for c in rng.permutation(10))
        else:
            color_map = (0, *(int(c) for c in rng.permutation(np.arange(1, 10))))
        return cls(hflip, rot90_k, color_map)

    @classmethod
    def from_row(cls, row: dict) -> Augmentation:
        return cls(bool(row["hflip"]), int(row["rot90_k"]), tuple(int(c) for c in row["color_map"]))

    def to_row(self) -> dict:
        return {"hflip": self.hflip, "rot90_k": self.rot90_k, "color_map": list(self.color_map)}

    @property
    def inverse_color_map(self) -> tuple[int, ...]:
        inverse = [0] * 10
        for original, augmented in enumerate(self.color_map):
            inverse[augmented] = original
        return tuple(inverse)

    def apply(self, grid: Grid) -> Grid:
        array = np.asarray(grid)
        if self.hflip:
            array = np.flip(array, axis=1)
        array = np.rot90(array, self.rot90_k)
        return np.asarray(self.color_map, dtype=np.int8)[array].astype(np.int8)

    def undo(self, grid: Grid) -> Grid:
        array = np.asarray(self.inverse_color_map, dtype=np.int8)[np.asarray(grid)]
        array = np.rot90(array, -self.rot90_k)
        if self.hflip:
            array = np.flip(array, axis=1)
        return np.ascontiguousarray(array, dtype=np.int8)

    def apply_task(self, task: Task) -> Task:
        def pair(p: Pair) -> Pair:
            return Pair(self.apply(p.input), None if p.output is None else self.apply(p.output))

        return Task(task.task_id, tuple(map(pair, task.train)), tuple(map(pair, task.test)), task.source)
