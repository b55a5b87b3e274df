"""ARC grids: validation, the model's text encoding (docs/formats.md) and text drawings.

A grid is a 2-D ``numpy.int8`` array with values 0..9 and at most 30 x 30 cells. Parquet stores it
as a nested ``list<list<int8>>`` (rows of cells).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_GRID_SIDE = 30
N_COLORS = 10

COLOR_NAMES: tuple[str, ...] = (
    "Black",
    "Blue",
    "Red",
    "Green",
    "Yellow",
    "Gray",
    "Pink",
    "Orange",
    "Purple",
    "Brown",
)

Grid = np.ndarray


class GridError(ValueError):
    """A value that is not a valid ARC grid; the message says why."""


def as_grid(value: Any, *, max_side: int = MAX_GRID_SIDE) -> Grid:
    """Convert nested lists (or an array) to a validated int8 grid, or raise GridError."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:  # ragged nested lists
        raise GridError(f"not a rectangular grid: {error}") from None
    if array.ndim != 2:
        raise GridError(f"grid must be 2-D, got {array.ndim}-D with shape {array.shape}")
    if array.size == 0:
        raise GridError(f"grid is empty (shape {array.shape})")
    if array.shape[0] > max_side or array.shape[1] > max_side:
        raise GridError(f"grid shape {array.shape} exceeds {max_side} x {max_side}")
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise GridError(f"grid values must be integers, got dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.floating):
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise GridError("grid values must be integers")
    if array.min() < 0 or array.max() >= N_COLORS:
        raise GridError(f"grid values must be in 0..9, got {int(array.min())}..{int(array.max())}")
    return array.astype(np.int8, copy=True)


def grid_to_lists(grid: Grid) -> list[list[int]]:
    """Nested Python lists, as parquet stores a grid."""
    return np.asarray(grid, dtype=np.int8).tolist()


def grids_to_lists(grids: Sequence[Grid]) -> list[list[list[int]]]:
    return [grid_to_lists(grid) for grid in grids]


def grid_to_text(grid: Grid) -> str:
    """The model's encoding: colour names joined by spaces, rows joined by newlines."""
    return "\n".join(" ".join(COLOR_NAMES[int(cell)] for cell in row) for row in np.asarray(grid))


def draw_grid(grid: Grid) -> str:
    """A compact drawing for humans (digits, '.' for black), used by ``arc-pipeline inspect``."""
    return "\n".join("".join("." if int(cell) == 0 else str(int(cell)) for cell in row) for row in np.asarray(grid))
