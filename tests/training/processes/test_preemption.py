"""Preemption of training: SIGTERM (HTCondor's and Slurm's notice before they kill a job) saves a
checkpoint at the end of the step under way and stops with status 1; the rerun resumes from it and ends
where an uninterrupted run ends. Real ``arc-pipeline train`` processes on the CPU, the tiny random Llama.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.training.checkpoints import last_complete_checkpoint
from tests.training.training_helpers import SHORT_CPU_RUN, preempt_after_first_step, train_command
from tests.workflow.fault_helpers import NOT_COMPARED_METRICS


def step_metrics(metrics: Path) -> pl.DataFrame:
    """The metrics table without wall-clock timings, the phase timer's times and memory peaks
    (arc_pipeline/training/phases.py) and the trainer's end-of-run summary (about the steps the last process
    ran): docs/reliability.md."""
    frame = pl.read_parquet(metrics)
    return frame.filter(~pl.col("name").str.contains(NOT_COMPARED_METRICS))


def test_checkpoint_choice_skips_a_cut_trainer_state(tmp_path):
    for step, state in ((1, '{"global_step": 1}'), (2, '{"global_st'), (3, None)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-1"


@pytest.mark.slow
def test_sigterm_checkpoints_and_the_rerun_resumes_to_the_same_end(tiny_model, refinement_dataset, tmp_path):
    dataset = refinement_dataset(8)
    preempted, uninterrupted = tmp_path / "preempted", tmp_path / "uninterrupted"
    command = train_command(dataset, tiny_model, preempted, SHORT_CPU_RUN)

    status, stderr = preempt_after_first_step(command, preempted / "metrics.parquet")
    assert status == 1, stderr[-3000:]
    checkpoint = last_complete_checkpoint(preempted / "adapter_checkpoints")
    assert checkpoint is not None, "SIGTERM saved no checkpoint"
    step = int(checkpoint.name.split("-")[1])
    assert 1 <= step < SHORT_CPU_RUN["max_steps"]  # the step under way, before the run's own end
    assert f"arc-pipeline train: stopped by SIGTERM; saved checkpoint-{step}" in stderr
    assert "Traceback" not in stderr
    assert not (preempted / "adapter").exists()  # the adapter is written only at the end

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resuming from {checkpoint}" in rerun.stderr
    assert "training done at step 4" in rerun.stderr

    reference_command = train_command(dataset, tiny_model, uninterrupted, SHORT_CPU_RUN)
    reference = subprocess.run(reference_command, capture_output=True, text=True)
    assert reference.returncode == 0, reference.stderr[-3000:]
    resumed, whole = step_metrics(preempted / "metrics.parquet"), step_metrics(uninterrupted / "metrics.parquet")
    assert resumed["step"].unique().sort().to_list() == [1, 2, 3, 4]
    assert resumed.equals(whole)  # every value of every step, in the same rows
    # the weights bit for bit; the config as data (peft writes target_modules from a set, in the
    # process's string-hash order, so their order differs between any two runs)
    weights = "adapter_model.safetensors"
    assert (preempted / "adapter" / weights).read_bytes() == (uninterrupted / "adapter" / weights).read_bytes()
    assert adapter_config(preempted) == adapter_config(uninterrupted)


def adapter_config(out: Path) -> dict:
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    return {**config, "target_modules": sorted(config["target_modules"])}
