"""The canary task family (docs/canary.md): tasks whose solution is one of a few known one-line programs.

The learning canary (``config/canary.yaml``) checks that GRPO with the real ARC reward improves a model
that can only guess: the base model is warmed up on the answer format with these programs' bodies, drawn
independently of the task (``model.tiny.warmup_answers: canary``; uniformly, or with
``warmup_canary_weights``), so it solves about one task in ``len(CANARY_PROGRAMS)`` on the first turn when
uniform. The tasks draw their solution with ``programs``'
weights, so a policy that learns which programs tend to be right, from the reward alone, beats the base
model. Nothing else tells it: rows and tasks hold grids only, as BARC's rows do.

Every input is drawn so that each program of the family gives a different output and none returns the
input unchanged: exactly one program of the family solves a task (in the tasks' own frame; an augmented
frame may turn a flip into the other flip, or a transposition into the anti-transposition).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from arc_pipeline.domain.grids import Grid
from arc_pipeline.domain.tasks import Pair, Task


@dataclass(frozen=True)
class CanaryProgram:
    """One program of the family: the line a BARC-style ``transform`` returns, and what it computes."""

    name: str
    body: str
    apply: Callable[[np.ndarray], np.ndarray]


CANARY_PROGRAMS: dict[str, CanaryProgram] = {
    program.name: program
    for program in (
        # np.flip without an axis reverses both: a half turn. Every body ends in "(input_grid)", so a small
        # model that mixes up names still writes valid calls.
        CanaryProgram("rot180", "return np.flip(input_grid)", lambda grid: np.rot90(grid, 2)),
        CanaryProgram("flipud", "return np.flipud(input_grid)", np.flipud),
        CanaryProgram("fliplr", "return np.fliplr(input_grid)", np.fliplr),
        CanaryProgram("transpose", "return np.transpose(input_grid)", np.transpose),
    )
}
CANARY_BODIES: tuple[str, ...] = tuple(program.body for program in CANARY_PROGRAMS.values())


class CanaryTasksConfig(BaseModel):
    """How many canary tasks, drawn how (``source: canary`` of ``barc.download`` and ``arc_tasks``)."""

    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(64, ge=1, description="tasks (BARC rows for barc.download, evaluation tasks for arc_tasks)")
    programs: dict[str, float] = Field(
        default_factory=lambda: {"rot180": 0.7, "flipud": 0.1, "fliplr": 0.1, "transpose": 0.1},
        description=f"solution programs and their weights (names from {sorted(CANARY_PROGRAMS)}); the base "
        "model guesses uniformly, so a skewed mix is what RL can learn from the reward",
    )
    examples: int = Field(
        5, ge=3, description="input/output pairs per task; held-out tasks use the last one as their test pair"
    )
    min_side: int = Field(3, ge=2, le=30, description="smallest grid side")
    max_side: int = Field(6, ge=2, le=30, description="largest grid side")
    colors: int = Field(3, ge=1, le=9, description="colours besides black (0) in a grid")
    fill: float = Field(0.5, gt=0, le=1, description="share of coloured (non-black) cells")
    seed: int = Field(0, description="seed of the draws: use different seeds for training and held-out tasks")

    @model_validator(mode="after")
    def _check(self) -> CanaryTasksConfig:
        unknown = sorted(set(self.programs) - set(CANARY_PROGRAMS))
        if unknown:
            raise ValueError(f"programs: unknown {unknown}; choose from {sorted(CANARY_PROGRAMS)}")
        if not self.programs or any(weight < 0 for weight in self.programs.values()):
            raise ValueError("programs: give at least one program, with weights >= 0")
        if sum(self.programs.values()) <= 0:
            raise ValueError("programs: the weights must not all be 0")
        if self.min_side > self.max_side:
            raise ValueError("min_side must not exceed max_side")
        return self


MAX_INPUT_DRAWS = 1000


def draw_input(rng: np.random.Generator, config: CanaryTasksConfig) -> Grid:
    """A random grid on which every family program gives a distinct output, none equal to the input."""
    for _ in range(MAX_INPUT_DRAWS):
        height, width = (int(side) for side in rng.integers(config.min_side, config.max_side + 1, size=2))
        palette = rng.choice(np.arange(1, 10), size=config.colors, replace=False)
        grid = np.where(rng.random((height, width)) < config.fill, rng.choice(palette, size=(height, width)), 0)
        grid = grid.astype(np.int8)
        outputs = [grid, *(program.apply(grid) for program in CANARY_PROGRAMS.values())]
        if all(a.shape != b.shape or not np.array_equal(a, b) for i, a in enumerate(outputs) for b in outputs[i + 1 :]):
            return grid
    raise ValueError(
        f"no grid of sides {config.min_side}..{config.max_side} told the canary programs apart in "
        f"{MAX_INPUT_DRAWS} draws: allow larger grids or more colours"
    )


def draw_program(rng: np.random.Generator, config: CanaryTasksConfig) -> CanaryProgram:
    # by name, not by the mapping's order: a rule's config slice reaches the stage with sorted keys, and a preset
    # read in-process (benchmarks/canary_power.py) must draw the same tasks
    names = sorted(config.programs)
    weights = np.array([config.programs[name] for name in names], dtype=float)
    return CANARY_PROGRAMS[names[int(rng.choice(len(names), p=weights / weights.sum()))]]


def canary_examples(config: CanaryTasksConfig) -> list[tuple[str, list[tuple[Grid, Grid]]]]:
    """``(program name, input/output pairs)`` per task; seeded, so the same config gives the same tasks."""
    rng = np.random.default_rng([config.seed, 0xCA7A])
    tasks = []
    for _ in range(config.tasks):
        program = draw_program(rng, config)
        inputs = [draw_input(rng, config) for _ in range(config.examples)]
        tasks.append((program.name, [(grid, np.ascontiguousarray(program.apply(grid))) for grid in inputs]))
    return tasks


def canary_rows(config: CanaryTasksConfig) -> list[dict]:
    """The tasks as BARC jsonl rows (``examples`` = [input, output] pairs); the solution is not in the row."""
    return [
        {
            "source": "# canary task (arc_pipeline/domain/canary.py)",
            "examples": [[grid.tolist(), output.tolist()] for grid, output in pairs],
            "seeds": [],
        }
        for _, pairs in canary_examples(config)
    ]


def canary_tasks(config: CanaryTasksConfig, prefix: str = "canary") -> list[Task]:
    """The tasks as ARC tasks with a known test output: every pair but the last is a train pair."""
    return [
        Task(
            task_id=f"{prefix}_{index:05d}",
            train=tuple(Pair(grid, output) for grid, output in pairs[:-1]),
            test=(Pair(*pairs[-1]),),
            source="canary",
        )
        for index, (_, pairs) in enumerate(canary_examples(config))
    ]
