"""Fingerprint of a prediction's outputs, to count distinct outputs per task (docs/scoring.md).

sha256 over every grid's shape and int8 values, in order: stable across processes and machines
(Python's ``hash`` is salted per process, so it cannot be used).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np

from arc_pipeline.domain.grids import Grid

FINGERPRINT_CHARS = 16


def fingerprint(grids: Sequence[Grid]) -> str:
    """16 hex characters identifying the grids' count, shapes and values."""
    digest = hashlib.sha256(struct.pack("<I", len(grids)))
    for grid in grids:
        array = np.ascontiguousarray(grid, dtype=np.int8)
        if array.ndim != 2:
            raise ValueError(f"grid must be 2-D, got shape {array.shape}")
        digest.update(struct.pack("<II", *array.shape))
        digest.update(array.tobytes())
    return digest.hexdigest()[:FINGERPRINT_CHARS]
