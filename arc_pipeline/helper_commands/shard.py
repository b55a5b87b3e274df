"""``arc-pipeline shard``: shard K of N of a tasks parquet, for inference spread over many GPUs.

Shards are contiguous blocks of tasks in file order, as even as possible (the first
``len % N`` shards hold one task more), so concatenating shards 0..N-1 gives the input back.
Inference seeds each task's rounds from its own id, so its predictions do not depend on the sharding.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from arc_pipeline.errors import PipelineError
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import TASKS_SCHEMA

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, required=True, help="tasks parquet to split")
    parser.add_argument("--index", type=int, required=True, help="which shard, 0-based (0..count-1)")
    parser.add_argument("--count", type=int, required=True, help="number of shards")
    parser.add_argument("--output", type=Path, required=True, help="the shard's tasks parquet")


def shard_bounds(n_rows: int, index: int, count: int) -> tuple[int, int]:
    """Row range [start, stop) of shard ``index`` of ``count`` over ``n_rows`` rows."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in 0..{count - 1}, got {index}")
    size, extra = divmod(n_rows, count)
    start = index * size + min(index, extra)
    return start, start + size + (index < extra)


def take_shard(frame: pl.DataFrame, index: int, count: int) -> pl.DataFrame:
    start, stop = shard_bounds(frame.height, index, count)
    return frame.slice(start, stop - start)


def run(args: argparse.Namespace) -> int:
    frame = read_frame(args.tasks, TASKS_SCHEMA)
    try:
        shard = take_shard(frame, args.index, args.count)
    except ValueError as error:
        raise PipelineError(f"--index {args.index} --count {args.count}: {error}") from None
    if shard.height == 0:
        log.warning("%s: shard %d of %d is empty (%d tasks)", args.tasks, args.index, args.count, frame.height)
    log.info("%s: shard %d of %d holds %d of %d tasks", args.tasks, args.index, args.count, shard.height, frame.height)
    write_table(shard, args.output, TASKS_SCHEMA)
    return 0
