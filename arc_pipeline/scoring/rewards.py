"""Rewards of one completion from its execution (docs/scoring.md).

Both rewards are 0 when the program gave no valid outputs. Otherwise the train and test grids are
pooled (weighted by count): ``arc-v1`` = 1 + 8 x correct_grids + pixel_score and
``arc-v2-no-pixel-score`` = 1 + 9 x correct_grids (the published runs). A fully solved task scores 10.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from arc_pipeline.domain.grids import Grid
from arc_pipeline.scoring.scores import similarities


def _arc_v1(values: Sequence[float]) -> float:
    correct_grids = sum(value == 1.0 for value in values) / len(values)
    pixel_score = sum(values) / len(values)
    return 1.0 + 8.0 * correct_grids + pixel_score


def _arc_v2_no_pixel_score(values: Sequence[float]) -> float:
    correct_grids = sum(value == 1.0 for value in values) / len(values)
    return 1.0 + 9.0 * correct_grids


_REWARDS: dict[str, Callable[[Sequence[float]], float]] = {
    "arc-v1": _arc_v1,
    "arc-v2-no-pixel-score": _arc_v2_no_pixel_score,
}
REWARD_NAMES: tuple[str, ...] = tuple(_REWARDS)
MAX_REWARD = 10.0


def reward_from_similarities(name: str, values: Sequence[float] | None) -> float:
    """The reward given each grid's pixel similarity (None or empty: no valid outputs -> 0)."""
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {list(REWARD_NAMES)}")
    if not values:
        return 0.0
    return _REWARDS[name](values)


def compute_reward(
    name: str,
    outputs: Sequence[Grid] | None,
    train_truth: Sequence[Grid],
    test_truth: Sequence[Grid] | None,
) -> float:
    """Reward of ``outputs`` (train outputs then test outputs, None if execution failed).

    With ``test_truth`` None (solutions unknown) only the train grids count and any test outputs
    after them are ignored.
    """
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {list(REWARD_NAMES)}")
    if outputs is None or len(outputs) == 0:
        return 0.0
    truths = list(train_truth) + ([] if test_truth is None else list(test_truth))
    if test_truth is None:
        if len(outputs) < len(truths):
            raise ValueError(f"{len(outputs)} outputs for {len(truths)} train grids")
        outputs = list(outputs)[: len(truths)]
    return reward_from_similarities(name, similarities(outputs, truths))
