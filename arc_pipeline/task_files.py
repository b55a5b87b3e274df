"""Reading tasks parquet files (``TASKS_SCHEMA``) into ``Task`` objects, for every stage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from arc_pipeline.domain.tasks import Task
from arc_pipeline.io import InputFileError, read_frame
from arc_pipeline.schemas import TASKS_SCHEMA


def tasks_from_frame(frame: pl.DataFrame, source: str) -> list[Task]:
    """Tasks of a TASKS_SCHEMA frame in file order; a duplicate id or a bad grid names ``source`` and the task."""
    duplicated = [task_id for task_id, count in Counter(frame["task_id"].to_list()).items() if count > 1]
    if duplicated:
        raise InputFileError(f"{source}: duplicate task ids {duplicated[:5]}")
    tasks = []
    for row in frame.iter_rows(named=True):
        try:
            tasks.append(Task.from_row(row))
        except (ValueError, TypeError) as error:
            raise InputFileError(f"{source}: task {row['task_id']}: {error}") from None
    return tasks


def read_tasks(path: Path) -> list[Task]:
    return tasks_from_frame(read_frame(path, TASKS_SCHEMA), str(path))


def read_tasks_by_id(paths: Iterable[Path]) -> dict[str, Task]:
    """Every task of the files by id (a task id in two files keeps the last one)."""
    return {task.task_id: task for path in paths for task in read_tasks(path)}
