"""Short real GRPO runs on the CPU (TRL + peft) with the tiny random Llama.

A random tiny model never writes a program, so the ARC reward is 0 for every completion. To check
that training learns, a second reward is added that the model can learn: the share of completion
tokens equal to one token that the untrained model writes in some completions but not most.
Completions are 4 tokens long and never finish, so truncated completions are not masked (masked,
the loss would be exactly zero).
"""

from __future__ import annotations

import os
from collections import Counter

import polars as pl
import pytest
import torch
from transformers import TrainerCallback

from arc_pipeline.io import read_frame
from arc_pipeline.schemas import TRAINING_METRICS_SCHEMA
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.grpo import train

pytestmark = pytest.mark.slow


class TokenShareReward:
    """The share of a completion's tokens that are ``target`` (dense, so it varies within a group)."""

    __name__ = "token_share"

    def __init__(self, target: int) -> None:
        self.target = target

    def __call__(self, completion_ids, **_) -> list[float]:
        return [sum(t == self.target for t in ids) / len(ids) if ids else 0.0 for ids in completion_ids]


def learnable_target(model_dir, dataset_path, config: TrainConfig) -> int:
    """A token the untrained model writes in some completions but not most (so there is room to learn).

    The random tiny model is very peaked, hence the test samples at temperature 3 (top-k 4).
    """
    from transformers import AutoModelForCausalLM

    from arc_pipeline.models.folder import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    prompt = read_frame(dataset_path)["prompt"][0].removeprefix(tokenizer.bos_token)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    inputs = tokenizer(prompt, return_tensors="pt")
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            **inputs,
            do_sample=True,
            top_k=config.top_k,
            top_p=1.0,
            temperature=config.temperature,
            max_new_tokens=config.max_completion_length,
            num_return_sequences=64,
            pad_token_id=tokenizer.pad_token_id,
        )
    completions = out[:, inputs["input_ids"].shape[1] :].tolist()
    containing = Counter(token for ids in completions for token in set(ids))
    candidates = [(count, token) for token, count in containing.items() if count <= 0.8 * len(completions)]
    return max(candidates)[1]


def cpu_config(**overrides) -> TrainConfig:
    values = dict(
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to=["none"],
        num_generations=8,
        gradient_accumulation_steps=2,
        max_completion_length=4,
        max_seq_length=2048,
        top_k=4,
        top_p=1.0,
        repetition_penalty=1.0,
        mask_truncated_completions=False,
        learning_rate=5e-3,
        warmup_ratio=0.0,
        max_grad_norm=1.0,
        execution_workers=1,
        save_steps=100,
    )
    values.update(overrides)
    return TrainConfig(**values)


def metric(frame: pl.DataFrame, name: str) -> list[float]:
    return frame.filter(pl.col("name") == name).sort("step")["value"].to_list()


def test_grpo_learns_a_learnable_reward(tiny_model, refinement_dataset, tmp_path):
    dataset = refinement_dataset(24)
    config = cpu_config(temperature=3.0, learning_rate=2e-3)
    target = learnable_target(tiny_model, dataset, config)
    metrics_path = tmp_path / "metrics.parquet"
    result = train(
        config, dataset, tiny_model, tmp_path / "adapter", metrics_path, extra_rewards=[(TokenShareReward(target), 1.0)]
    )
    assert result.global_step == 24 and result.resumed_from is None
    metrics = read_frame(metrics_path, TRAINING_METRICS_SCHEMA)
    learned = metric(metrics, "rewards/token_share/mean")
    assert len(learned) == 24
    first, last = sum(learned[:6]) / 6, sum(learned[-6:]) / 6
    assert last > first + 0.05, learned  # measured here: 0.14 -> 0.24
    # the ARC reward ran on every batch and its extra metrics came through TRL's log_metric
    assert set(metric(metrics, "rewards/arc-v2-no-pixel-score/mean")) == {0.0}
    assert metric(metrics, "arc/truncated_share") == metric(metrics, "completions/clipped_ratio")
    assert len(metric(metrics, "entropy")) == 24
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "adapter" / "training_summary.json").is_file()


class Killed(Exception):
    pass


class KillAfterSave(TrainerCallback):
    """Simulates the job being killed right after the checkpoint of ``step`` was written."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Killed(f"killed after checkpoint {self.step}")
        return control


class StartStep(TrainerCallback):
    def __init__(self) -> None:
        self.start: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = state.global_step
        return control


def test_rerun_resumes_from_last_checkpoint(tiny_model, refinement_dataset, tmp_path):
    dataset = refinement_dataset(4)
    config = cpu_config(save_steps=2)
    output, metrics_path = tmp_path / "adapter", tmp_path / "metrics.parquet"
    with pytest.raises(Killed):
        train(config, dataset, tiny_model, output, metrics_path, callbacks=[KillAfterSave(2)])
    assert not output.exists()  # the adapter only appears at the end
    # the curves are written while training runs: the killed run's windows are already there
    assert len(metric(read_frame(metrics_path, TRAINING_METRICS_SCHEMA), "reward")) == 2
    checkpoints = tmp_path / "adapter_checkpoints"
    assert (checkpoints / "checkpoint-2" / "adapter_model.safetensors").is_file()

    start = StartStep()
    result = train(config, dataset, tiny_model, output, metrics_path, callbacks=[start])
    assert start.start == 2  # continued from the checkpoint, not from zero
    assert result.resumed_from == str(checkpoints / "checkpoint-2")
    assert result.global_step == 4
    steps = metric(read_frame(metrics_path, TRAINING_METRICS_SCHEMA), "reward")
    assert len(steps) == 4  # the log history of steps 1-2 came back with the checkpoint

    # a changed learning rate is another run: its checkpoints are not resumed
    result = train(cpu_config(save_steps=2, learning_rate=2e-3), dataset, tiny_model, output, metrics_path)
    assert result.resumed_from is None and result.global_step == 4


def test_collapse_guard_stops_and_keeps_the_best_checkpoint(tiny_model, refinement_dataset, tmp_path):
    from arc_pipeline.training.config import CollapseGuardConfig

    dataset = refinement_dataset(6)
    guard = CollapseGuardConfig(max_truncated_share=0.5, patience=2)
    # every completion is truncated: the guard sees the collapse from step 1 and stops at step 2
    result = train(
        cpu_config(save_steps=1, collapse_guard=guard),
        dataset,
        tiny_model,
        tmp_path / "adapter",
        tmp_path / "metrics.parquet",
    )
    assert result.stopped_by_guard and result.global_step == 2
    assert result.kept_checkpoint is None  # nothing was saved before the first offending window
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()


def test_checkpoints_survive_a_move_and_a_finished_run_is_not_trained_further(tiny_model, refinement_dataset, tmp_path):
    import shutil

    first = tmp_path / "first"
    shutil.copytree(tiny_model, first / "model", symlinks=True)
    shutil.copy(refinement_dataset(4), first / "refine.parquet")
    config = cpu_config(save_steps=2, max_steps=2)
    result = train(config, first / "refine.parquet", first / "model", first / "adapter", first / "metrics.parquet")
    assert result.global_step == 2

    moved = tmp_path / "moved"  # results/ copied to scratch, another clone or mount point
    shutil.move(first, moved)
    start = StartStep()
    result = train(
        config,
        moved / "refine.parquet",
        moved / "model",
        moved / "adapter",
        moved / "metrics.parquet",
        callbacks=[start],
    )
    assert start.start is None  # no training step at all: the checkpoint already reached max_steps
    assert result.global_step == 2 and result.resumed_from == str(moved / "adapter_checkpoints" / "checkpoint-2")
    assert (moved / "adapter" / "adapter_model.safetensors").is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert (moved / "adapter" / "adapter_model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask
    assert len(metric(read_frame(moved / "metrics.parquet", TRAINING_METRICS_SCHEMA), "reward")) == 2

    # another run's checkpoints are moved aside, never deleted
    other = cpu_config(save_steps=2, max_steps=2, learning_rate=2e-3)
    result = train(other, moved / "refine.parquet", moved / "model", moved / "adapter", moved / "metrics.parquet")
    assert result.resumed_from is None
    assert (moved / "adapter_checkpoints.set-aside-1" / "checkpoint-2" / "adapter_model.safetensors").is_file()
