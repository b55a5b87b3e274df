"""Pixel similarity (docs/scoring.md) against hand-computed values and a brute-force reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_pipeline.scoring.fingerprint import fingerprint
from arc_pipeline.scoring.scores import partition_scores
from arc_pipeline.scoring.similarity import max_overlap_matches, pixel_similarity


def brute_force_matches(pred: np.ndarray, true: np.ndarray) -> int:
    """Independent reference: every offset, cell by cell."""
    (h1, w1), (h2, w2) = pred.shape, true.shape
    best = 0
    for dy in range(-h1 + 1, h2):
        for dx in range(-w1 + 1, w2):
            count = 0
            for i in range(h1):
                for j in range(w1):
                    if 0 <= i + dy < h2 and 0 <= j + dx < w2 and pred[i, j] == true[i + dy, j + dx]:
                        count += 1
            best = max(best, count)
    return best


def test_same_shape_is_share_of_equal_cells():
    assert pixel_similarity([[1, 2], [3, 4]], [[1, 2], [3, 4]]) == 1.0
    assert pixel_similarity([[1, 2], [3, 0]], [[1, 2], [3, 4]]) == 0.75
    assert pixel_similarity([[0, 0, 0]], [[1, 1, 1]]) == 0.0


def test_smaller_prediction_slides_inside_truth():
    # [1 2] matches the truth's first row: 2 equal cells / (2 x 2)
    assert pixel_similarity([[1, 2]], [[1, 2], [3, 4]]) == 0.5
    # [3 4] found on the second row
    assert pixel_similarity([[3, 4]], [[1, 2], [3, 4]]) == 0.5


def test_wider_prediction_overlaps_partly():
    # [5 1 2] shifted one column left puts "1 2" on the truth's first row: 2 / (max(1,2) x max(3,2)) = 2/6
    assert pixel_similarity([[5, 1, 2]], [[1, 2], [3, 4]]) == pytest.approx(1 / 3)


def test_partial_overlap_counts():
    # the only match needs the prediction's corner hanging off the truth: offset (-1, -1)
    assert pixel_similarity([[0, 0], [0, 7]], [[7, 1, 1], [1, 1, 1], [1, 1, 1]]) == pytest.approx(1 / 9)


def test_larger_prediction_containing_the_truth():
    pred = [[0, 0, 0], [0, 1, 2], [0, 3, 4]]
    assert pixel_similarity(pred, [[1, 2], [3, 4]]) == pytest.approx(4 / 9)


def test_a_different_shape_never_scores_one():
    assert pixel_similarity([[1, 1], [1, 1], [1, 1]], [[1, 1], [1, 1]]) == pytest.approx(4 / 6)


grid = st.integers(1, 6).flatmap(
    lambda h: st.integers(1, 6).flatmap(
        lambda w: st.lists(st.lists(st.integers(0, 3), min_size=w, max_size=w), min_size=h, max_size=h)
    )
)


@settings(max_examples=150, deadline=None)
@given(grid, grid)
def test_matches_brute_force(pred, true):
    pred, true = np.array(pred), np.array(true)
    assert max_overlap_matches(pred, true) == brute_force_matches(pred, true)
    value = pixel_similarity(pred, true)
    assert 0.0 <= value <= 1.0
    assert (value == 1.0) == (pred.shape == true.shape and np.array_equal(pred, true))


def test_large_grids():
    rng = np.random.default_rng(0)
    true = rng.integers(0, 10, (30, 30))
    pred = true[1:, 2:]  # a 29 x 28 crop: all its cells match at offset (1, 2)
    assert pixel_similarity(pred, true) == pytest.approx(29 * 28 / 900)


def test_partition_scores():
    truths = [np.array([[1, 2], [3, 4]]), np.array([[5]])]
    scores = partition_scores([np.array([[1, 2], [3, 0]]), np.array([[5]])], truths)
    assert scores.pixel_score == pytest.approx((0.75 + 1) / 2)
    assert scores.correct_grids == 0.5
    assert scores.is_correct is False
    assert partition_scores(truths, truths).is_correct is True
    assert partition_scores(truths, None) is None
    assert partition_scores(truths, [truths[0], None]) is None
    with pytest.raises(ValueError, match="2 output grids for 1"):
        partition_scores(truths, truths[:1])


def test_fingerprint_depends_on_shape_values_and_order():
    a, b = np.array([[1, 2, 3, 4]]), np.array([[1, 2], [3, 4]])
    assert fingerprint([a]) == fingerprint([np.array([[1, 2, 3, 4]], dtype=np.int64)])
    assert fingerprint([a]) != fingerprint([b])  # same bytes, other shape
    assert fingerprint([a, b]) != fingerprint([b, a])
    assert fingerprint([a]) != fingerprint([a, a])
    assert len(fingerprint([a])) == 16
    # stable across processes: a fixed value (sha256 of the little-endian count, shape and bytes)
    import hashlib
    import struct

    expected = hashlib.sha256(struct.pack("<I", 1) + struct.pack("<II", 1, 4) + bytes([1, 2, 3, 4])).hexdigest()[:16]
    assert fingerprint([a]) == expected
