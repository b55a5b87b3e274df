"""Data-parallel GRPO on the CPU: ``arc-pipeline train`` with ``training_processes: 2`` starts two gloo ranks
(arc_pipeline/training/launch.py) and ends like one process: the same steps, an adapter of the same shape,
one metrics table holding what both ranks generated, and a rerun that resumes from the checkpoint.
Real processes, the tiny random Llama.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from safetensors import safe_open

from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.grpo import train

pytestmark = pytest.mark.slow

CONFIG = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "report_to": ["none"],
    "num_generations": 4,
    "gradient_accumulation_steps": 2,
    "max_completion_length": 4,
    "max_seq_length": 2048,
    "max_steps": 2,
    "save_steps": 2,
    "logging_steps": 1,
    "learning_rate": 5e-3,
    "warmup_ratio": 0.0,
    "mask_truncated_completions": False,
    "execution_workers": 1,
}


def train_command(dataset: Path, model: Path, out: Path, config: dict) -> list[str]:
    return [
        sys.executable,
        "-m",
        "arc_pipeline.cli",
        "--log-file",
        str(out / "train.log"),
        "train",
        *("--dataset", str(dataset), "--model", str(model)),
        *("--output", str(out / "adapter"), "--metrics", str(out / "metrics.parquet")),
        *("--config-json", json.dumps(config)),
    ]


def adapter_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as weights:
        return {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118


def test_two_processes_train_like_one(tiny_model, refinement_dataset, tmp_path):
    dataset = refinement_dataset(4)
    one, two = tmp_path / "one", tmp_path / "two"
    reference = train(TrainConfig(**CONFIG), dataset, tiny_model, one / "adapter", one / "metrics.parquet")

    config = {**CONFIG, "training_processes": 2}
    run = subprocess.run(train_command(dataset, tiny_model, two, config), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    log = (two / "train.log").read_text()
    assert "--nproc-per-node=2" in log and "training done at step 2" in log
    assert log.count("adapter written to") == 1  # rank 0 alone writes the outputs

    summary = json.loads((two / "adapter" / "training_summary.json").read_text())
    assert summary["global_step"] == reference.global_step == 2
    assert adapter_shapes(two / "adapter") == adapter_shapes(one / "adapter")
    metrics = pl.read_parquet(two / "metrics.parquet")
    assert metrics.group_by("step", "name").len()["len"].max() == 1  # one table, not one per rank
    assert metrics.filter(pl.col("name") == "reward")["step"].sort().to_list() == [1, 2]
    # Each rank generates half of a step's completions; TRL gathers them before logging, so the token count
    # is both ranks' (the same prompt and 4-token completions: exactly the one-process count)
    single = pl.read_parquet(one / "metrics.parquet")
    tokens = [
        frame.filter(pl.col("name") == "num_tokens").sort("step")["value"].to_list() for frame in (single, metrics)
    ]
    assert tokens[0] == tokens[1] and tokens[0][-1] > 0

    # a rerun that asks for one more step resumes from the two-process checkpoint
    rerun = subprocess.run(
        train_command(dataset, tiny_model, two, {**config, "max_steps": 3}), capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming from {two / 'adapter_checkpoints' / 'checkpoint-2'}" in rerun.stderr
    assert json.loads((two / "adapter" / "training_summary.json").read_text())["global_step"] == 3
    steps = pl.read_parquet(two / "metrics.parquet").filter(pl.col("name") == "reward")["step"].to_list()
    assert sorted(steps) == [1, 2, 3]
