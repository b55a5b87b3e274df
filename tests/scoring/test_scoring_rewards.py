"""Rewards (docs/scoring.md) for solved, partly right, invalid and unparsable completions."""

import numpy as np
import pytest

from arc_pipeline.scoring.rewards import REWARD_NAMES, compute_reward

TRAIN = [np.array([[1, 2], [3, 4]]), np.array([[5, 5], [5, 5]])]
TEST = [np.array([[7]])]


def test_names():
    assert set(REWARD_NAMES) == {"arc-v1", "arc-v2-no-pixel-score"}


@pytest.mark.parametrize("name", REWARD_NAMES)
def test_solved_scores_ten(name):
    assert compute_reward(name, [*TRAIN, *TEST], TRAIN, TEST) == pytest.approx(10.0)


def test_partly_right():
    # similarities: 1, 0.5 (two of four cells), 1 -> correct_grids 2/3, pixel_score 2.5/3
    outputs = [TRAIN[0], np.array([[5, 5], [0, 0]]), TEST[0]]
    assert compute_reward("arc-v1", outputs, TRAIN, TEST) == pytest.approx(1 + 8 * 2 / 3 + 2.5 / 3)
    assert compute_reward("arc-v2-no-pixel-score", outputs, TRAIN, TEST) == pytest.approx(1 + 9 * 2 / 3)


def test_valid_but_all_wrong_with_a_wrong_shape():
    # similarities: 0 (wrong values), [[5]] in a 2x2 of 5s -> 1/4, 0 -> pixel_score (0.25)/3
    outputs = [np.zeros((2, 2), dtype=int), np.array([[5]]), np.array([[0]])]
    assert compute_reward("arc-v1", outputs, TRAIN, TEST) == pytest.approx(1 + 0.25 / 3)
    assert compute_reward("arc-v2-no-pixel-score", outputs, TRAIN, TEST) == 1.0


@pytest.mark.parametrize("name", REWARD_NAMES)
def test_invalid_or_unparsable_scores_zero(name):
    # both an execution error and a completion without code reach the reward as "no outputs"
    assert compute_reward(name, None, TRAIN, TEST) == 0.0
    assert compute_reward(name, [], TRAIN, TEST) == 0.0


def test_unknown_test_solutions_use_train_only():
    outputs = [TRAIN[0], np.array([[0, 0], [0, 0]]), np.array([[9]])]
    assert compute_reward("arc-v2-no-pixel-score", outputs, TRAIN, None) == pytest.approx(1 + 9 * 0.5)


def test_errors():
    with pytest.raises(ValueError, match="unknown reward"):
        compute_reward("nope", None, TRAIN, TEST)
    with pytest.raises(ValueError):
        compute_reward("arc-v1", [TRAIN[0]], TRAIN, TEST)
