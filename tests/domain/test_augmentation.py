"""Augmentation (docs/prompts.md): exact forward transform, exact undo, colour-map statistics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arc_pipeline.domain.augmentation import Augmentation
from arc_pipeline.domain.tasks import Pair, Task

DIHEDRAL = list(itertools.product([False, True], range(4)))

grids = st.tuples(st.integers(1, 30), st.integers(1, 30)).flatmap(
    lambda shape: arrays(np.int8, shape, elements=st.integers(0, 9))
)
color_maps = st.permutations(list(range(10))).map(tuple)


@settings(max_examples=200, deadline=None)
@given(grid=grids, color_map=color_maps)
def test_undo_inverts_apply_for_every_dihedral_element(grid, color_map):
    for hflip, k in DIHEDRAL:
        augmentation = Augmentation(hflip, k, color_map)
        augmented = augmentation.apply(grid)
        assert augmented.dtype == np.int8
        restored = augmentation.undo(augmented)
        assert restored.dtype == np.int8
        np.testing.assert_array_equal(restored, grid)


@settings(max_examples=100, deadline=None)
@given(grid=grids, color_map=color_maps)
def test_apply_inverts_undo(grid, color_map):
    """Undo is a bijection too: predicted grids of any shape come back and go out unchanged."""
    for hflip, k in DIHEDRAL:
        augmentation = Augmentation(hflip, k, color_map)
        np.testing.assert_array_equal(augmentation.apply(augmentation.undo(grid)), grid)


def test_apply_is_flip_then_rotate_then_recolour():
    grid = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.int8)
    color_map = (0, 2, 3, 4, 5, 6, 7, 8, 9, 1)  # c -> c + 1, 9 -> 1, black stays
    augmentation = Augmentation(hflip=True, rot90_k=1, color_map=color_map)
    # flip columns: [[2, 1, 0], [5, 4, 3]]; rot90 once (counter-clockwise): [[0, 3], [1, 4], [2, 5]]
    expected = np.array([[0, 4], [2, 5], [3, 6]], dtype=np.int8)
    np.testing.assert_array_equal(augmentation.apply(grid), expected)
    np.testing.assert_array_equal(augmentation.undo(expected), grid)


def test_undo_accepts_nested_lists():
    augmentation = Augmentation(True, 3, (0, 9, 8, 7, 6, 5, 4, 3, 2, 1))
    grid = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int8)
    np.testing.assert_array_equal(augmentation.undo(augmentation.apply(grid).tolist()), grid)


def test_identity_and_inverse_map():
    grid = np.arange(10, dtype=np.int8).reshape(2, 5)
    np.testing.assert_array_equal(Augmentation.identity().apply(grid), grid)
    augmentation = Augmentation(False, 0, (3, 0, 1, 2, 4, 5, 6, 7, 8, 9))
    assert augmentation.inverse_color_map == (1, 2, 3, 0, 4, 5, 6, 7, 8, 9)


@pytest.mark.parametrize(
    ("args", "message"),
    [((False, 4, tuple(range(10))), "rot90_k"), ((False, 0, (0, 0, 1, 2, 3, 4, 5, 6, 7, 8)), "permutation")],
)
def test_rejects_invalid_parameters(args, message):
    with pytest.raises(ValueError, match=message):
        Augmentation(*args)


def test_row_round_trip():
    augmentation = Augmentation(True, 2, (0, 5, 3, 1, 2, 4, 6, 9, 8, 7))
    row = augmentation.to_row()
    assert row == {"hflip": True, "rot90_k": 2, "color_map": [0, 5, 3, 1, 2, 4, 6, 9, 8, 7]}
    assert Augmentation.from_row(row) == augmentation
    parquet_like = {"hflip": np.bool_(True), "rot90_k": np.int8(2), "color_map": np.array(row["color_map"], np.int8)}
    assert Augmentation.from_row(parquet_like) == augmentation


def test_apply_task_augments_every_grid_the_same_way():
    task = Task(
        "t",
        train=(Pair(np.array([[1, 2]], dtype=np.int8), np.array([[3], [4]], dtype=np.int8)),),
        test=(Pair(np.array([[5, 0]], dtype=np.int8), None),),
        source="s",
    )
    augmentation = Augmentation(True, 1, (0, 2, 1, 4, 3, 6, 5, 8, 7, 9))
    augmented = augmentation.apply_task(task)
    assert augmented.task_id == "t" and augmented.source == "s"
    np.testing.assert_array_equal(augmented.train[0].input, augmentation.apply(task.train[0].input))
    np.testing.assert_array_equal(augmented.train[0].output, augmentation.apply(task.train[0].output))
    np.testing.assert_array_equal(augmented.test[0].input, augmentation.apply(task.test[0].input))
    assert augmented.test[0].output is None


class RecordingGenerator:
    """Delegates to a seeded numpy Generator and records which colour branch each draw took."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.full_permutations = 0
        self.partial_permutations = 0

    def integers(self, *args, **kwargs):
        return self.rng.integers(*args, **kwargs)

    def random(self, *args, **kwargs):
        return self.rng.random(*args, **kwargs)

    def permutation(self, x):
        if (np.ndim(x) == 0 and int(x) == 10) or (np.ndim(x) == 1 and len(x) == 10):
            self.full_permutations += 1
        else:
            self.partial_permutations += 1
        return self.rng.permutation(x)


def test_random_keeps_black_unless_the_full_permutation_branch_fires():
    rng = RecordingGenerator(seed=1234)
    n = 5000
    black_moved = 0
    for _ in range(n):
        before = rng.full_permutations
        augmentation = Augmentation.random(rng)
        full = rng.full_permutations > before
        if not full:
            assert augmentation.color_map[0] == 0
        black_moved += augmentation.color_map[0] != 0
    assert rng.full_permutations + rng.partial_permutations == n
    # P(full) = 0.1: binomial standard deviation over 5000 draws is 0.0042.
    assert abs(rng.full_permutations / n - 0.1) < 0.02
    # Observable without the recorder: black moves in a full permutation 9 times in 10.
    assert abs(black_moved / n - 0.09) < 0.02


def test_random_geometry_is_uniform_and_seeded():
    draws = [Augmentation.random(np.random.default_rng(seed)) for seed in range(4000)]
    assert abs(np.mean([d.hflip for d in draws]) - 0.5) < 0.04
    counts = np.bincount([d.rot90_k for d in draws], minlength=4) / len(draws)
    assert np.all(np.abs(counts - 0.25) < 0.04)
    assert Augmentation.random(np.random.default_rng(7)) == Augmentation.random(np.random.default_rng(7))
    assert len({d.color_map for d in draws}) > 3900  # 9! x 0.9 + 10! x 0.1 possible maps
