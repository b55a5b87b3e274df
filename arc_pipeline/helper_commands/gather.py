"""``arc-pipeline gather``: concatenate shard parquets of one kind, in the order given.

Each input is checked against the kind's schema, and the result must not hold the same key twice
(prediction ids for predictions and executions, task ids for tasks): a shard run twice or two
overlapping shards fail here, naming the files, rather than silently double-counting later.
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa

from arc_pipeline.io import InputFileError, read_table, write_table
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, TASKS_SCHEMA

log = logging.getLogger(__name__)

# kind -> (schema, key column that must be unique)
KINDS: dict[str, tuple[pa.Schema, str]] = {
    "predictions": (PREDICTIONS_SCHEMA, "prediction_id"),
    "executions": (EXECUTIONS_SCHEMA, "prediction_id"),
    "tasks": (TASKS_SCHEMA, "task_id"),
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inputs", type=Path, nargs="+", required=True, help="parquet files to concatenate")
    parser.add_argument("--output", type=Path, required=True, help="the concatenated parquet")
    parser.add_argument("--schema", choices=sorted(KINDS), required=True, help="what kind of files they are")


def gather(paths: list[Path], kind: str) -> pa.Table:
    """The concatenation of ``paths``; raises InputFileError on a schema mismatch or duplicate keys."""
    schema, key = KINDS[kind]
    tables = [read_table(path, schema) for path in paths]
    owners: dict[str, list[str]] = {}
    counts: Counter[str] = Counter()
    for path, table in zip(paths, tables, strict=True):
        for value in table.column(key).to_pylist():
            counts[value] += 1
            if counts[value] > 1:
                owners.setdefault(value, []).append(str(path))
    if owners:
        examples = "; ".join(f"{value} (again in {', '.join(files)})" for value, files in list(owners.items())[:5])
        raise InputFileError(f"gather: {len(owners)} duplicate {key}s across the inputs, e.g. {examples}")
    return pa.concat_tables(tables) if tables else schema.empty_table()


def run(args: argparse.Namespace) -> int:
    table = gather(list(args.inputs), args.schema)
    log.info("gathered %d %s rows from %d files", table.num_rows, args.schema, len(args.inputs))
    write_table(table, args.output, KINDS[args.schema][0])
    return 0
