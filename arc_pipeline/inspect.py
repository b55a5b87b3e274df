"""``arc-pipeline inspect PATH``: schema, row count and the first rows of a parquet, grids drawn as text."""

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
    return (pa.types.is_list(arrow_type) and pa.types.is_list(arrow_type.value_type)
            and pa.types.is_integer(arrow_type.value_type.value_type))


def is_grids_type(arrow_type: pa.DataType) -> bool:
    return pa.types.is_list(arrow_type) and is_grid_type(arrow_type.value_type)


def format_value(value: Any, arrow_type: pa.DataType) -> str:
    if value is None:
        return "null"
    if is_grids_type(arrow_type):
        drawings = [draw_grid(grid).split("\n") for grid in value]
        return _side_by_side(drawings) if drawings else "[]"
    if is_grid_type(arrow_type):
        return draw_grid(value)
    text = str(value)
    if len(text) > TEXT_PREVIEW_CHARS:
        text = text[:TEXT_PREVIEW_CHARS] + f"... ({len(text)} chars)"
    return text


def _side_by_side(drawings: list[list[str]]) -> str:
    height = max(len(lines) for lines in drawings)
    widths = [max(len(line) for line in lines) for lines in drawings]
    rows = []
    for y in range(height):
        cells = [(lines[y] if y < len(lines) else "").ljust(width) for lines, width in zip(drawings, widths)]
        rows.append("  |  ".join(cells).rstrip())
    return "\n".join(rows)


def render(path: Path, rows: int) -> str:
    table = read_table(path)
    lines = [f"{path}: {table.num_rows} rows, {table.num_columns} columns",
             f"parquet metadata: {pq.ParquetFile(path).metadata.num_row_groups} row groups", "", "schema:"]
    lines += [f"  {field.name}: {field.type}" for field in table.schema]
    for index, row in enumerate(table.slice(0, rows).to_pylist()):
        lines += ["", f"--- row {index} ---"]
        for field in table.schema:
            text = format_value(row[field.name], field.type)
            if "\n" in text:
                lines.append(f"{field.name}:")
                lines += ["    " + line for line in text.split("\n")]
            else:
                lines.append(f"{field.name}: {text}")
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a parquet file written by the pipeline")
    parser.add_argument("-n", "--rows", type=int, default=3, help="rows to show")


def run(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(render(args.path, args.rows) + "\n")
    except InputFileError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    return 0
