"""The ARC reward of completions, executed in the real sandbox, against hand-computed values."""

from __future__ import annotations

import pytest
from training_helpers import recolor_task

from arc_pipeline.training.completion_stats import max_ngram_count, unique_token_ratio
from arc_pipeline.training.rewards import ArcReward, is_truncated

SOLVES = (
    "The blue cells turn red.\n```python\nfrom common import *\nimport numpy as np\n\n"
    "def transform(input_grid):\n    output_grid = input_grid.copy()\n"
    "    output_grid[output_grid == Color.BLUE] = Color.RED\n    return output_grid\n```\nDone."
)
IDENTITY = "```python\ndef transform(input_grid):\n    return input_grid\n```"
CRASHES = "```python\ndef transform(input_grid):\n    raise ValueError('no idea')\n```"
INVALID = "```python\ndef transform(input_grid):\n    return [[11, 12]]\n```"
UNPARSABLE = "The blue cells turn red, but I will not write code."
COMPLETIONS = [SOLVES, IDENTITY, CRASHES, INVALID, UNPARSABLE]
EOS = 7


def columns(n: int, with_test_outputs: bool = True) -> dict:
    row = recolor_task().to_row()
    return {
        "train_inputs": [row["train_inputs"]] * n,
        "train_outputs": [row["train_outputs"]] * n,
        "test_inputs": [row["test_inputs"]] * n,
        "test_outputs": [row["test_outputs"] if with_test_outputs else None] * n,
    }


@pytest.fixture(scope="module")
def sandbox():
    from arc_pipeline.sandbox import Sandbox, SandboxConfig

    with Sandbox(SandboxConfig(workers=2, timeout_s=5.0, memory_mb=4096)) as box:
        yield box


# identity: train grid 1 has 3 of 4 cells right, train grid 2 is right, the test grid 3 of 4:
# correct_grids 1/3, pixel_score (0.75 + 1 + 0.75) / 3
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("arc-v2-no-pixel-score", [10.0, 1 + 9 / 3, 0.0, 0.0, 0.0]),
        ("arc-v1", [10.0, 1 + 8 / 3 + 2.5 / 3, 0.0, 0.0, 0.0]),
    ],
)
def test_reward_of_solved_partial_invalid_and_unparsable(sandbox, name, expected):
    reward = ArcReward(name, sandbox, stop_token_ids=[EOS])
    ids = [[1, EOS]] * len(COMPLETIONS)
    values = reward(prompts=["p"] * 5, completions=COMPLETIONS, completion_ids=ids, **columns(5))
    assert values == pytest.approx(expected)
    outcomes = reward.score(COMPLETIONS, completion_ids=ids, **columns(5))
    assert [o.error_type for o in outcomes][:2] == [None, None]
    assert outcomes[4].error_type == "ParsingCodeFailed"
    assert outcomes[2].error_type is not None and outcomes[3].error_type is not None


def test_unknown_test_outputs_score_train_only(sandbox):
    reward = ArcReward("arc-v2-no-pixel-score", sandbox, stop_token_ids=[EOS])
    values = reward(prompts=["p"] * 2, completions=[SOLVES, IDENTITY], **columns(2, with_test_outputs=False))
    assert values == pytest.approx([10.0, 1 + 9 / 2])


def test_truncated_reward_and_logged_metrics(sandbox):
    reward = ArcReward("arc-v2-no-pixel-score", sandbox, stop_token_ids=[EOS], truncated_reward=0.0)
    ids = [[3, 4, 5, EOS], [9, 9, 9, 9, 9, 9], [1, EOS], [1, 2, EOS], [2, 2, 2, 2, 2]]
    logged: dict[str, float] = {}
    values = reward(
        prompts=["p"] * 5, completions=COMPLETIONS, completion_ids=ids, log_metric=logged.__setitem__, **columns(5)
    )
    # the identity program is truncated: its reward is replaced by truncated_reward
    assert values == pytest.approx([10.0, 0.0, 0.0, 0.0, 0.0])
    assert logged["arc/reward_max"] == 10.0 and logged["arc/reward_min"] == 0.0
    assert logged["arc/truncated_share"] == pytest.approx(2 / 5)
    assert logged["arc/truncated_reward_mean"] == 0.0
    assert logged["arc/solved_share"] == pytest.approx(1 / 5)
    assert logged["arc/solved_length_mean"] == 4.0
    assert logged["arc/memory_error_share"] == 0.0
    assert logged["arc/max_3gram_count/truncated"] == pytest.approx((4 + 3) / 2)  # 9 9 9 x4, 2 2 2 x3
    assert logged["arc/unique_token_ratio/truncated"] == pytest.approx((1 / 6 + 1 / 5) / 2)
    assert logged["arc/max_4gram_count/non_truncated"] == pytest.approx((1 + 0 + 0) / 3)


def test_token_statistics():
    assert unique_token_ratio([1, 2, 2, 3]) == 0.75
    assert max_ngram_count([1, 2, 3, 1, 2, 3, 1, 2], 3) == 2
    assert max_ngram_count([1, 2], 3) == 0
    assert is_truncated([4, 5], [5]) is False
    assert is_truncated([5, 4], [5]) is True
    assert is_truncated([], [5]) is True
