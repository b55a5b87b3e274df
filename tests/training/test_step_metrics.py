"""The published run's extra per-step metrics (batch_metrics), against hand-computed values."""

from __future__ import annotations

import pytest

from arc_pipeline.training.completion_stats import (
    CompletionOutcome,
    batch_metrics,
    max_ngram_share,
    unique_ngram_ratio,
)


def outcome(reward, truncated, ids, task="t1"):
    return CompletionOutcome(reward=reward, truncated=truncated, error_type=None, token_ids=ids, task_id=task)


BATCH = [
    outcome(10.0, False, [1, 2, 3, 4, 5]),  # solves, 5 tokens
    outcome(10.0, False, [1, 2, 3]),  # solves, 3 tokens
    outcome(4.0, False, [7, 7, 7, 7]),  # finished, wrong
    outcome(1.0, True, [9, 9, 9, 9, 9, 9]),  # truncated
    outcome(3.0, True, [1, 2, 1, 2, 1, 2]),  # truncated
    outcome(0.0, False, [5, 6, 7], task="t2"),  # another task, unsolved
]


def test_longest_solving_completion():
    assert batch_metrics(BATCH)["arc/solved_length_max"] == 5
    assert "arc/solved_length_max" not in batch_metrics(BATCH[2:])


def test_solved_in_step():
    assert batch_metrics(BATCH)["arc/solved_in_step"] == pytest.approx(1 / 2)  # t1 solved, t2 not
    assert batch_metrics(BATCH[:3])["arc/solved_in_step"] == 1.0
    assert batch_metrics(BATCH[2:])["arc/solved_in_step"] == 0.0


def test_truncated_reward_max():
    assert batch_metrics(BATCH)["arc/truncated_reward_max"] == 3.0
    assert "arc/truncated_reward_max" not in batch_metrics(BATCH[:3])


def test_non_truncated_reward_mean_and_max():
    metrics = batch_metrics(BATCH)
    assert metrics["arc/non_truncated_reward_mean"] == pytest.approx((10 + 10 + 4 + 0) / 4)
    assert metrics["arc/non_truncated_reward_max"] == 10.0
    assert "arc/non_truncated_reward_mean" not in batch_metrics(BATCH[3:5])


def test_unique_ngram_ratio():
    assert unique_ngram_ratio([1, 2, 1, 2, 1, 2], 3) == pytest.approx(2 / 4)  # (1,2,1) and (2,1,2)
    assert unique_ngram_ratio([9] * 6, 4) == pytest.approx(1 / 3)
    assert unique_ngram_ratio([1, 2], 3) == 0.0
    metrics = batch_metrics(BATCH)
    assert metrics["arc/unique_3gram_ratio/truncated"] == pytest.approx((1 / 4 + 2 / 4) / 2)
    assert metrics["arc/unique_3gram_ratio/non_truncated"] == pytest.approx((1 + 1 + 1 / 2 + 1) / 4)


def test_most_repeated_ngram_frequency():
    assert max_ngram_share([1, 2, 1, 2, 1, 2], 3) == pytest.approx(2 / 4)
    assert max_ngram_share([9] * 6, 4) == 1.0
    assert max_ngram_share([1, 2, 3], 4) == 0.0
    metrics = batch_metrics(BATCH)
    assert metrics["arc/max_4gram_share/truncated"] == pytest.approx((1.0 + 2 / 3) / 2)  # (1,2,1,2) twice of 3
