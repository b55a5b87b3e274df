"""Advantage groups through TRL's own code: the sampler that forms the generation batch and the
trainer's reward-to-advantage computation, on synthetic rewards.

Published run: num_generations 8, every task 4 times per step -> 4 groups of 8 completions of one
prompt, advantages centred per group of 8 and scaled by the std of all 32 (scale_rewards batch).
Option: one group of 32 (num_generations 32, task_repeats 1), centred and scaled over all 32.
"""

from __future__ import annotations

import numpy as np
import pytest

from arc_pipeline.models.folder import load_tokenizer
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.grpo import grpo_arguments, load_refinement_dataset
from tests.training.training_helpers import grpo_trainer

pytestmark = pytest.mark.slow

# 32 rewards whose groups of 8 have different means, so per-group and whole-batch centring differ
REWARDS = [float(i % 5 + 3 * (i // 8)) for i in range(32)]


class SyntheticReward:
    """Returns REWARDS in order, whatever the completions (the batch is always 32 completions)."""

    __name__ = "synthetic"

    def __call__(self, completions, **_) -> list[float]:
        assert len(completions) == len(REWARDS)
        return list(REWARDS)


def config(**overrides) -> TrainConfig:
    values = dict(
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to=["none"],
        gradient_accumulation_steps=4,
        max_completion_length=4,
        max_seq_length=2048,
        execution_workers=1,
    )
    return TrainConfig(**{**values, **overrides})


def first_generation_batch(train_config: TrainConfig, tiny_model, dataset_path, tmp_path):
    """The trainer's first generation batch (sampler order) and the advantages TRL computes for it."""
    trainer, dataset = grpo_trainer(train_config, tiny_model, dataset_path, tmp_path / "run", SyntheticReward())
    assert trainer.args.generation_batch_size == 32
    indexes = list(iter(trainer._get_train_sampler()))[:32]
    rows = [dataset[i] for i in indexes]
    output = trainer._generate_and_score_completions(rows)
    return rows, output["advantages"].float().numpy()


def test_four_groups_of_eight_centred_per_group_scaled_by_the_batch(tiny_model, refinement_dataset, tmp_path):
    train_config = config(num_generations=8, task_repeats=4, scale_rewards="batch")
    rows, advantages = first_generation_batch(train_config, tiny_model, refinement_dataset(3), tmp_path)
    # one task per generation batch: all 32 completions answer the same refinement prompt
    assert len({row["prediction_id"] for row in rows}) == 1
    rewards = np.array(REWARDS).reshape(4, 8)
    expected = (rewards - rewards.mean(axis=1, keepdims=True)) / (rewards.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(advantages, expected.reshape(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages.reshape(4, 8).sum(axis=1), 0.0, atol=1e-4)  # centred per group


def test_one_group_of_thirty_two(tiny_model, refinement_dataset, tmp_path):
    train_config = config(num_generations=32, task_repeats=1, scale_rewards="batch")
    rows, advantages = first_generation_batch(train_config, tiny_model, refinement_dataset(3), tmp_path)
    assert len({row["prediction_id"] for row in rows}) == 1
    rewards = np.array(REWARDS)
    expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-4)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-5)
    # the two structures really differ on these rewards
    per_group = (rewards.reshape(4, 8) - rewards.reshape(4, 8).mean(axis=1, keepdims=True)).reshape(-1)
    assert not np.allclose(advantages, per_group / (rewards.std(ddof=1) + 1e-4), atol=1e-2)


def test_repeats_keep_each_task_in_one_step(tiny_model, refinement_dataset):
    train_config = config(num_generations=8, task_repeats=4)
    dataset, counts = load_refinement_dataset(refinement_dataset(3), load_tokenizer(tiny_model), train_config)
    ids = dataset["prediction_id"]
    assert counts["kept"] == 3 and len(ids) == 12
    assert all(len(set(ids[i : i + 4])) == 1 for i in range(0, 12, 4)) and len(set(ids)) == 3
    assert not grpo_arguments(train_config, "/tmp/unused", [1.0]).shuffle_dataset


def test_trl_options_are_set_from_config():
    published = grpo_arguments(config(num_generations=8, task_repeats=4), "/tmp/unused", [1.0])
    assert published.vllm_importance_sampling_correction is False
    assert published.use_bias_correction_kl is False
    trl_defaults = grpo_arguments(
        config(num_generations=8, vllm_importance_sampling_correction=True, use_bias_correction_kl=True),
        "/tmp/unused",
        [1.0],
    )
    assert trl_defaults.vllm_importance_sampling_correction is True
    assert trl_defaults.use_bias_correction_kl is True
    with pytest.raises(ValueError, match="task_repeats"):
        config(num_generations=8, task_repeats=4, per_device_train_batch_size=4)
