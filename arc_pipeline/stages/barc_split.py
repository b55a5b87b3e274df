"""Stage ``barc_split``: part k (1-based) of the shuffled BARC task ids, ``tasks_per_part`` each.

One job per part, so deleting one part's parquet regenerates only that part. The shuffle depends
only on the seed and the set of task ids, so every part job agrees on the order.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import TASKS_SCHEMA

log = logging.getLogger(__name__)


class BarcSplitConfig(BaseModel):
    """The parts BARC inference runs on: n_parts disjoint random samples of tasks_per_part tasks."""

    model_config = ConfigDict(extra="forbid")

    n_parts: PositiveInt = Field(2, description="number of parts")
    tasks_per_part: PositiveInt = Field(10_000, description="tasks in each part")
    seed: int = Field(0, description="seed of the shuffle of task ids")


def part_task_ids(task_ids: list[str], part: int, config: BarcSplitConfig) -> list[str]:
    if not 1 <= part <= config.n_parts:
        raise PipelineError(f"--part must be in 1..{config.n_parts} (barc.split.n_parts), got {part}")
    shuffled = np.random.default_rng(config.seed).permutation(sorted(task_ids)).tolist()
    needed = config.n_parts * config.tasks_per_part
    if len(shuffled) < needed:
        raise PipelineError(
            f"{config.n_parts} parts x {config.tasks_per_part} tasks need {needed} tasks, "
            f"but only {len(shuffled)} exist: lower barc.split.tasks_per_part or n_parts"
        )
    start = (part - 1) * config.tasks_per_part
    return shuffled[start : start + config.tasks_per_part]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, required=True, help="tasks parquet from barc-tasks")
    parser.add_argument("--part", type=int, required=True, help="1-based part number")
    parser.add_argument("--output", type=Path, required=True)
    add_config_argument(parser)


def run(args: argparse.Namespace) -> None:
    config = parse_config(args, BarcSplitConfig)
    tasks = read_frame(args.tasks, TASKS_SCHEMA)
    ids = part_task_ids(tasks["task_id"].to_list(), args.part, config)
    order = pl.DataFrame({"task_id": ids, "_order": range(len(ids))})
    part = tasks.join(order, on="task_id").sort("_order").drop("_order")
    write_table(part, args.output, TASKS_SCHEMA)
    log.info("part %d: %d tasks -> %s", args.part, part.height, args.output)
