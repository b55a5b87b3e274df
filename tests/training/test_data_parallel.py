"""Data-parallel GRPO on the CPU: ``arc-pipeline train`` with ``training_processes: 2`` starts two gloo ranks
(arc_pipeline/training/launch.py) and ends like one process: the same steps, an adapter of the same shape,
one metrics table holding what both ranks generated; SIGTERM makes both ranks save one checkpoint, and a
rerun resumes from it.
Real processes, the tiny random Llama.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import psutil
import pytest
from safetensors import safe_open

from arc_pipeline.training.checkpoints import last_complete_checkpoint
from tests.training.training_helpers import SHORT_CPU_RUN, preempt_after_first_step, train_command

pytestmark = pytest.mark.slow


def adapter_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(folder / "adapter_model.safetensors"), "pt") as weights:
        return {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118


def test_two_processes_train_like_one_and_resume_after_sigterm(tiny_model, refinement_dataset, tmp_path):
    """Also two train stages at once on one machine: the one-process reference runs beside the two-process
    rerun, and both finish (each process group on a port of its own: arc_pipeline/training/processes/ports.py; the
    colocated engine's port, which the CPU cannot run, in test_launch.py)."""
    dataset = refinement_dataset(4)
    one, two = tmp_path / "one", tmp_path / "two"
    config = {**SHORT_CPU_RUN, "training_processes": 2}
    command = train_command(dataset, tiny_model, two, config)

    # preempted after the first step: both ranks save the same checkpoint and stop, nothing is left running
    status, stderr = preempt_after_first_step(command, two / "metrics.parquet")
    assert status == 1, stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1].startswith("arc-pipeline train: stopped by SIGTERM"), stderr[-3000:]
    checkpoint = last_complete_checkpoint(two / "adapter_checkpoints")
    assert checkpoint is not None, stderr[-3000:]
    step = int(checkpoint.name.split("-")[1])
    assert 1 <= step < SHORT_CPU_RUN["max_steps"]
    for rank in (0, 1):
        assert f"arc-pipeline train [rank {rank}]: stopped by SIGTERM; saved checkpoint-{step}" in stderr
    assert not (two / "adapter").exists()
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(dataset) in " ".join(p.info["cmdline"] or [])]

    single = subprocess.Popen(train_command(dataset, tiny_model, one, SHORT_CPU_RUN), stderr=subprocess.PIPE, text=True)
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    _, single_stderr = single.communicate(timeout=600)
    assert single.returncode == 0, single_stderr[-3000:]
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming from {checkpoint}" in rerun.stderr
    assert "--nproc-per-node=2" in rerun.stderr and "training done at step 4" in rerun.stderr
    assert rerun.stderr.count("adapter written to") == 1  # rank 0 alone writes the outputs

    summary = json.loads((two / "adapter" / "training_summary.json").read_text())
    reference = json.loads((one / "adapter" / "training_summary.json").read_text())
    assert summary["global_step"] == reference["global_step"] == SHORT_CPU_RUN["max_steps"]
    assert adapter_shapes(two / "adapter") == adapter_shapes(one / "adapter")
    metrics = pl.read_parquet(two / "metrics.parquet")
    assert metrics.group_by("step", "name").len()["len"].max() == 1  # one table, not one per rank
    assert metrics.filter(pl.col("name") == "reward")["step"].sort().to_list() == [1, 2, 3, 4]
    # Each rank generates half of a step's completions; TRL gathers them before logging, so the token count
    # is both ranks' (the same prompt and 4-token completions: exactly the one-process count)
    single = pl.read_parquet(one / "metrics.parquet")
    tokens = [
        frame.filter(pl.col("name") == "num_tokens").sort("step")["value"].to_list() for frame in (single, metrics)
    ]
    assert tokens[0] == tokens[1] and tokens[0][-1] > 0
