"""``arc-pipeline inspect PATH``: schema, row count and the first rows of a parquet, grids drawn as text.

``--where`` keeps the rows matching a SQL condition (polars SQL: ``"task_id = 'abc' AND score > 0"``),
``--columns`` shows only some columns, ``--full`` shows long text (prompts, feedback) uncut.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arc_pipeline.domain.grids import draw_grid
from arc_pipeline.io import InputFileError, read_table

TEXT_PREVIEW_CHARS = 300


def is_grid_type(arrow_type: pa.DataType) -> bool:
    return (
        pa.types.is_list(arrow_type)
        and pa.types.is_list(arrow_type.value_type)
        and pa.types.is_integer(arrow_type.value_type.value_type)
    )


def is_grids_type(arrow_type: pa.DataType) -> bool:
    return pa.types.is_list(arrow_type) and is_grid_type(arrow_type.value_type)


def format_value(value: Any, arrow_type: pa.DataType, full: bool = False) -> str:
    if value is None:
        return "null"
    if is_grids_type(arrow_type):
        drawings = [draw_grid(grid).split("\n") for grid in value]
        return _side_by_side(drawings) if drawings else "[]"
    if is_grid_type(arrow_type):
        return draw_grid(value)
    text = str(value)
    if not full and len(text) > TEXT_PREVIEW_CHARS:
        text = text[:TEXT_PREVIEW_CHARS] + f"... ({len(text)} chars; --full shows all)"
    return text


def _side_by_side(drawings: list[list[str]]) -> str:
    height = max(len(lines) for lines in drawings)
    widths = [max(len(line) for line in lines) for lines in drawings]
    rows = []
    for y in range(height):
        cells = [(lines[y] if y < len(lines) else "").ljust(width) for lines, width in zip(drawings, widths)]
        rows.append("  |  ".join(cells).rstrip())
    return "\n".join(rows)


def select(table: pa.Table, where: str | None, columns: list[str] | None) -> pa.Table:
    """The rows matching ``where`` (polars SQL) and only ``columns``; bad input names what is wrong."""
    if columns:
        unknown = [name for name in columns if name not in table.column_names]
        if unknown:
            raise InputFileError(f"unknown columns {unknown}; the file has {table.column_names}")
    if where:
        import polars as pl

        try:
            frame = pl.from_arrow(
                table.drop_columns([f.name for f in table.schema if is_grid_type(f.type) or is_grids_type(f.type)])
            )
            indices = frame.with_row_index("__row").filter(pl.sql_expr(where))["__row"].to_list()
        except Exception as error:  # polars raises several types for a bad SQL condition
            raise InputFileError(f"--where {where!r}: {type(error).__name__}: {error}") from None
        table = table.take(indices)
    return table.select(columns) if columns else table


def render(
    path: Path, rows: int, where: str | None = None, columns: list[str] | None = None, full: bool = False
) -> str:
    table = read_table(path)
    total, n_columns = table.num_rows, table.num_columns
    table = select(table, where, columns)
    lines = [
        f"{path}: {total} rows, {n_columns} columns",
        f"parquet metadata: {pq.ParquetFile(path).metadata.num_row_groups} row groups",
        "",
        "schema:",
    ]
    lines += [f"  {field.name}: {field.type}" for field in table.schema]
    if where:
        lines += ["", f"{table.num_rows} rows match {where!r}"]
    for index, row in enumerate(table.slice(0, rows).to_pylist()):
        lines += ["", f"--- row {index} ---"]
        for field in table.schema:
            text = format_value(row[field.name], field.type, full)
            if "\n" in text:
                lines.append(f"{field.name}:")
                lines += ["    " + line for line in text.split("\n")]
            else:
                lines.append(f"{field.name}: {text}")
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a parquet file written by the pipeline")
    parser.add_argument("-n", "--rows", type=int, default=3, help="rows to show")
    parser.add_argument(
        "-w", "--where", help="SQL condition on the columns, e.g. \"task_id = '00576224' AND score < 1\""
    )
    parser.add_argument(
        "-c",
        "--columns",
        type=lambda text: [c.strip() for c in text.split(",") if c.strip()],
        help="comma-separated columns to show (default: all)",
    )
    parser.add_argument("--full", action="store_true", help=f"show text uncut (default: {TEXT_PREVIEW_CHARS} chars)")


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(render(args.path, args.rows, args.where, args.columns, args.full) + "\n")
    return 0
