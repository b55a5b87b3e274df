"""``arc-pipeline shard``: shard K of N of a tasks or refinement parquet, for inference spread over many GPUs.

Shards are contiguous blocks of rows in file order, as even as possible (the first
``len % N`` shards hold one row more), so concatenating shards 0..N-1 gives the input back.
Inference seeds each task's rounds from its own id, so its predictions do not depend on the sharding.
But with ``--refinements`` inference numbers a task's rounds by its rows in file order, so a refinement
shard must not cut through a task's rows: that fails here, not as duplicate prediction ids at the gather.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl
import pyarrow as pa

from arc_pipeline.errors import PipelineError
from arc_pipeline.io import InputFileError, read_frame, write_table
from arc_pipeline.schemas import REFINEMENT_SCHEMA, TASKS_SCHEMA

log = logging.getLogger(__name__)

# kind -> its schema (the kinds inference reads: --tasks, --refinements)
KINDS: dict[str, pa.Schema] = {"tasks": TASKS_SCHEMA, "refinements": REFINEMENT_SCHEMA}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", "--tasks", dest="input", type=Path, required=True, help="parquet to split")
    parser.add_argument("--index", type=int, required=True, help="which shard, 0-based (0..count-1)")
    parser.add_argument("--count", type=int, required=True, help="number of shards")
    parser.add_argument("--output", type=Path, required=True, help="the shard's parquet, of the input's kind")
    parser.add_argument("--schema", choices=sorted(KINDS), default="tasks", help="what kind of file it is")


def shard_bounds(n_rows: int, index: int, count: int) -> tuple[int, int]:
    """Row range [start, stop) of shard ``index`` of ``count`` over ``n_rows`` rows."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    if not 0 <= index < count:
        raise ValueError(f"shard index must be in 0..{count - 1}, got {index}")
    size, extra = divmod(n_rows, count)
    start = index * size + min(index, extra)
    return start, start + size + (index < extra)


def split_task(frame: pl.DataFrame, start: int, stop: int) -> str | None:
    """A task whose rows the bounds [start, stop) cut through, if any."""
    task_ids = frame["task_id"]
    for edge in (start, stop):
        if 0 < edge < frame.height and task_ids[edge - 1] == task_ids[edge]:
            return task_ids[edge]
    return None


def run(args: argparse.Namespace) -> int:
    frame = read_frame(args.input, KINDS[args.schema])
    try:
        start, stop = shard_bounds(frame.height, args.index, args.count)
    except ValueError as error:
        raise PipelineError(f"--index {args.index} --count {args.count}: {error}") from None
    cut = split_task(frame, start, stop) if args.schema == "refinements" else None
    if cut is not None:
        raise InputFileError(
            f"{args.input}: shard {args.index} of {args.count} would split the rows of task {cut} between two "
            "shards (inference numbers a task's refinement rounds in file order, so their prediction ids would "
            "repeat); use a count that keeps every task's rows together"
        )
    shard = frame.slice(start, stop - start)
    if shard.height == 0:
        log.warning("%s: shard %d of %d is empty (%d rows)", args.input, args.index, args.count, frame.height)
    log.info(
        "%s: shard %d of %d holds %d of %d %s rows",
        args.input,
        args.index,
        args.count,
        shard.height,
        frame.height,
        args.schema,
    )
    write_table(shard, args.output, KINDS[args.schema])
    return 0
