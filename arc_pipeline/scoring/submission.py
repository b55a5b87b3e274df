"""Kaggle ``submission.json`` for the ARC Prize: building, validating and scoring it.

Format: ``{task_id: [{"attempt_1": grid, "attempt_2": grid}, ...one dict per test input]}`` with a
grid as a list of rows of plain ints. Every task of the challenge set must be there, with both
attempts for every test input; a missing attempt is filled with the placeholder ``[[0]]``.
Scoring as on Kaggle: a test input counts if either attempt equals the solution exactly; a task's
score is the mean over its test inputs; the overall score is the mean over tasks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from arc_pipeline.domain.grids import MAX_GRID_SIDE, N_COLORS, Grid
from arc_pipeline.domain.tasks import Task
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import write_text

ATTEMPT_KEYS = ("attempt_1", "attempt_2")
PLACEHOLDER: list[list[int]] = [[0]]

Submission = dict[str, list[dict[str, list[list[int]]]]]


class SubmissionError(PipelineError, ValueError):
    """A submission that Kaggle would reject or mis-score; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        super().__init__(f"invalid submission ({len(problems)} problem(s)):\n  " + "\n  ".join(shown))


def _tasks_map(tasks: Mapping[str, Task] | Iterable[Task]) -> dict[str, Task]:
    if isinstance(tasks, Mapping):
        return dict(tasks)
    return {task.task_id: task for task in tasks}


def _plain(grid: Grid | Sequence[Sequence[int]]) -> list[list[int]]:
    """Plain Python ints (json cannot write numpy integers)."""
    return [[int(cell) for cell in row] for row in np.asarray(grid).tolist()]


def build_submission(
    attempts: Mapping[str, Sequence[Sequence[Grid]]], tasks: Mapping[str, Task] | Iterable[Task]
) -> Submission:
    """One entry per task of ``tasks`` (in its order), two attempts per test input.

    ``attempts[task_id][i]`` holds up to two grids for test input ``i`` (see ``voting.vote``);
    tasks, inputs or attempts without a grid get ``[[0]]``.
    """
    submission: Submission = {}
    for task_id, task in _tasks_map(tasks).items():
        task_attempts = attempts.get(task_id, [])
        entries = []
        for index in range(len(task.test)):
            grids = list(task_attempts[index]) if index < len(task_attempts) else []
            entry = {key: (_plain(grids[i]) if i < len(grids) else PLACEHOLDER) for i, key in enumerate(ATTEMPT_KEYS)}
            entries.append(entry)
        submission[task_id] = entries
    return submission


def grid_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid JSON ARC grid, or None when it is."""
    if not isinstance(value, list) or not value:
        return "is not a non-empty list of rows"
    if len(value) > MAX_GRID_SIDE:
        return f"has {len(value)} rows (at most {MAX_GRID_SIDE})"
    width = None
    for r, row in enumerate(value):
        if not isinstance(row, list) or not row:
            return f"row {r} is not a non-empty list"
        if width is None:
            width = len(row)
        elif len(row) != width:
            return f"row {r} has {len(row)} cells, row 0 has {width} (not rectangular)"
        if len(row) > MAX_GRID_SIDE:
            return f"row {r} has {len(row)} cells (at most {MAX_GRID_SIDE})"
        for c, cell in enumerate(row):
            if type(cell) is not int:
                return f"cell ({r}, {c}) is {type(cell).__name__} {cell!r}, not an int"
            if not 0 <= cell < N_COLORS:
                return f"cell ({r}, {c}) is {cell}, not in 0..9"
    return None


def submission_problems(submission: Any, tasks: Mapping[str, Task] | Iterable[Task]) -> list[str]:
    """Every problem of ``submission`` against the challenge ``tasks`` (empty list = valid)."""
    tasks = _tasks_map(tasks)
    if not isinstance(submission, dict):
        return [f"submission must be a JSON object of task ids, got {type(submission).__name__}"]
    problems = [f"task {task_id}: missing" for task_id in tasks if task_id not in submission]
    problems += [f"task {task_id}: not in the challenge set" for task_id in submission if task_id not in tasks]
    for task_id, task in tasks.items():
        entries = submission.get(task_id)
        if entries is None:
            continue
        if not isinstance(entries, list):
            problems.append(f"task {task_id}: must be a list of one dict per test input, got {type(entries).__name__}")
            continue
        if len(entries) != len(task.test):
            problems.append(f"task {task_id}: {len(entries)} entries for {len(task.test)} test input(s)")
        for index, entry in enumerate(entries):
            where = f"task {task_id}, test input {index}"
            if not isinstance(entry, dict):
                problems.append(f"{where}: must be a dict with {list(ATTEMPT_KEYS)}, got {type(entry).__name__}")
                continue
            for key in ATTEMPT_KEYS:
                if key not in entry:
                    problems.append(f"{where}: {key} missing")
                elif (problem := grid_problem(entry[key])) is not None:
                    problems.append(f"{where}: {key} {problem}")
            extra = sorted(set(entry) - set(ATTEMPT_KEYS))
            if extra:
                problems.append(f"{where}: unexpected keys {extra}")
    return problems


def validate_submission(submission: Any, tasks: Mapping[str, Task] | Iterable[Task]) -> None:
    """Raise SubmissionError listing every problem; return None for a valid submission."""
    problems = submission_problems(submission, tasks)
    if problems:
        raise SubmissionError(problems)


def score_submission(submission: Submission, tasks: Mapping[str, Task] | Iterable[Task]) -> pl.DataFrame:
    """Per task: ``test_inputs``, ``correct`` (inputs with an exactly right attempt) and ``score``.

    The submission is validated first; every task needs known test solutions. The Kaggle score
    is ``score_submission(...)["score"].mean()``.
    """
    tasks = _tasks_map(tasks)
    validate_submission(submission, tasks)
    unknown = [task_id for task_id, task in tasks.items() if any(g is None for g in task.test_outputs)]
    if unknown:
        raise ValueError(f"cannot score: test solutions unknown for task(s) {unknown[:5]}")
    rows = []
    for task_id, task in tasks.items():
        correct = 0
        for entry, solution in zip(submission[task_id], task.test_outputs):
            truth = _plain(solution)
            correct += any(entry[key] == truth for key in ATTEMPT_KEYS)
        rows.append(
            {"task_id": task_id, "test_inputs": len(task.test), "correct": correct, "score": correct / len(task.test)}
        )
    return pl.DataFrame(
        rows, schema={"task_id": pl.String, "test_inputs": pl.Int64, "correct": pl.Int64, "score": pl.Float64}
    )


def write_submission(submission: Submission, path: str | os.PathLike) -> Path:
    """Write ``submission.json`` atomically (compact, as Kaggle expects)."""
    return write_text(json.dumps(submission, separators=(",", ":")), path)


def read_submission(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: file not found") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
