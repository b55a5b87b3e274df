"""Pixel similarity of a predicted grid to the truth (docs/scoring.md).

Same shape: the share of equal cells. Different shapes: the prediction is slid over the truth at
every offset where the two overlap (partial overlaps included), the largest number of equal cells
in an overlap is taken and divided by ``max(h1, h2) * max(w1, w2)``, so a wrong shape never scores 1.

A domain measure of two grids: the refinement prompt's feedback quotes it (prompts.py) and scoring builds
its scores on it (arc_pipeline/scoring/scores.py, which reads it through ``scoring.similarity``).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from arc_pipeline.domain.grids import Grid

_PAD = -1  # never equal to a colour (0..9), so cells outside the truth never count as matches


def max_overlap_matches(prediction: Grid, truth: Grid) -> int:
    """Largest number of equal cells over all offsets where ``prediction`` overlaps ``truth``.

    Fully vectorised. ``R[i, k, dx]`` counts the equal cells of prediction row ``i`` and truth
    row ``k`` at column offset ``dx`` (the truth's rows are padded with a value no colour equals,
    so partial overlaps count only their overlap); the count at row offset ``dy`` is the sum of
    ``R[i, i + dy, dx]`` over ``i``, a diagonal sum done by writing ``R`` through a skewed view.
    The overlap count is symmetric, so the narrower grid plays the prediction's part (less work).
    """
    pred = np.asarray(prediction, dtype=np.int8)
    true = np.asarray(truth, dtype=np.int8)
    if pred.shape[1] > true.shape[1]:
        pred, true = true, pred
    (h1, w1), (h2, w2) = pred.shape, true.shape
    n_dx = w1 + w2 - 1
    padded = np.pad(true, ((0, 0), (w1 - 1, w1 - 1)), constant_values=_PAD)
    windows = sliding_window_view(padded, w1, axis=1)  # (h2, n_dx, w1)
    rows = (pred[:, None, None, :] == windows[None]).sum(axis=-1, dtype=np.int16)  # (h1, h2, n_dx)
    by_offset = np.zeros((h1, h1 + h2 - 1, n_dx), dtype=np.int16)  # [i, dy + h1 - 1, dx]
    s0, s1, s2 = by_offset.strides
    skewed = as_strided(by_offset[0, h1 - 1 :], shape=(h1, h2, n_dx), strides=(s0 - s1, s1, s2))
    skewed[...] = rows  # skewed[i, k] is by_offset[i, k - i + h1 - 1]
    return int(by_offset.sum(axis=0).max())


def pixel_similarity(prediction: Grid, truth: Grid) -> float:
    """Similarity in [0, 1]; 1 only when ``prediction`` equals ``truth`` exactly."""
    pred = np.asarray(prediction)
    true = np.asarray(truth)
    if pred.ndim != 2 or true.ndim != 2:
        raise ValueError(f"grids must be 2-D, got shapes {pred.shape} and {true.shape}")
    if pred.shape == true.shape:
        return float(np.mean(pred == true))
    (h1, w1), (h2, w2) = pred.shape, true.shape
    return max_overlap_matches(pred, true) / (max(h1, h2) * max(w1, w2))
