"""The embedded default DAG up to the trained adapter through a real Slurm scheduler (slow: minutes on 2 cores, in
the background of the session's other workflow tests; why not its evaluation half: SLURM_TARGET in
tests/workflow/slurm_cluster.py).

scripts/slurm_local.sh brings up a one-node cluster on this machine (munged, slurmctld, slurmd; the node declares
the machine's CPUs and memory and one GPU that is only counted). Snakemake runs with profiles/slurm, as a user
on a cluster would, so every job goes through sbatch and runs as an srun step of its allocation. Checked:

* every job of the DAG ran as a Slurm job that completed (slurmctld's own records, `scontrol show job`, and
  each job's Slurm log); only the rule meant to run on the submit machine (barc_download) did not;
* the GPU rules' jobs held a GPU (`--gpus=1`, slurmctld's TresPerJob), no other job did;
* the outputs equal those of the local run of the same config (the session's `finished` run), compared as
  data, table by table (which tables, and why they can be equal: the comment above TIME_COLUMNS);
* each job wrote its benchmark file inside its allocation.

Needs root (the daemons run as root) and Slurm, which the script installs with apt-get where it is missing.
Without root or apt the test skips in one line; under CI (CI=true) it fails instead.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.training.phases import MEMORY_METRIC_PREFIX, PHASE_METRIC_PREFIX
from tests.test_profiles import GPU_RULES
from tests.workflow.conftest import Workflow
from tests.workflow.slurm_cluster import SLURM_TARGET

pytestmark = pytest.mark.slow

SUBMIT_MACHINE_RULES = {"barc_download"}  # localrules: the hub download needs the internet
# Compared with the local run: every parquet table the run leaves in results/ (the data of every stage, from the
# BARC tasks to the evaluation's tables; train/checkpoints, the trainer's own state, aside), and the weights of
# the built model and of the trained adapter, byte for byte. A rerun of the same config reproduces them all: the
# data stages are seeded, vLLM samples with a seed per request (inference.seed) and GRPO on CPU is seeded
# (train.seed), with the same thread count in both runs (cluster.gpu.threads). Dropped are only measurements
# of time and memory: the execution's per-program duration, the trainer's timing metrics and the step
# breakdown's time/<phase> and memory/* metrics (arc_pipeline/training/phases.py).
TIME_COLUMNS = {"duration_s"}
TIME_METRICS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
MEASUREMENT_PREFIXES = (PHASE_METRIC_PREFIX, MEMORY_METRIC_PREFIX)
WEIGHTS = ("model/base/model.safetensors", "train/adapter/adapter_model.safetensors")


def _rule_of(comment: str, rules: set[str]) -> str:
    """The plugin's job comment is rule_<rule> or rule_<rule>_wildcards_<values>."""
    matches = [r for r in rules if comment == f"rule_{r}" or comment.startswith(f"rule_{r}_wildcards_")]
    assert len(matches) == 1, f"comment {comment!r} names no single rule of {sorted(rules)}"
    return matches[0]


@pytest.fixture(scope="module")
def slurm_run(slurm_run_started, finished: Workflow):
    """The run through Slurm (started with the session's first workflow test, tests/workflow/conftest.py), at its
    end. Its config is the local run's but for `cluster:`, which no rule's params hold (slurm_cluster.py)."""
    run = slurm_run_started.wait()
    differing = {key for key in finished.config if run[0].config[key] != finished.config[key]}
    assert differing <= {"cluster"}, differing
    return run


def test_every_job_ran_as_a_completed_slurm_job(slurm_run) -> None:
    run, planned, jobs, _ = slurm_run
    expected = {rule: n for rule, n in planned.items() if rule not in SUBMIT_MACHINE_RULES}
    assert set(planned) - set(expected) == SUBMIT_MACHINE_RULES and SLURM_TARGET in expected
    per_rule = Counter(_rule_of(job["Comment"], set(planned)) for job in jobs)
    assert dict(per_rule) == expected
    assert {(job["JobState"], job["ExitCode"]) for job in jobs} == {("COMPLETED", "0:0")}
    for job in jobs:  # the plugin's log of each job (profiles/slurm keeps them)
        logs = list((run.workdir / "logs" / "slurm").rglob(f"{job['JobId']}.log"))
        assert len(logs) == 1 and "Finished jobid" in logs[0].read_text(), job["JobId"]


def test_gpu_rules_held_a_gpu(slurm_run) -> None:
    _, planned, jobs, _ = slurm_run
    assert SLURM_TARGET in planned and {"inference", "train"} <= GPU_RULES & set(planned)
    holding = {_rule_of(job["Comment"], set(planned)) for job in jobs if job.get("TresPerJob") == "gres:gpu:1"}
    assert holding == GPU_RULES & set(planned)
    others = [job for job in jobs if _rule_of(job["Comment"], set(planned)) not in GPU_RULES]
    assert others and all(job.get("TresPerJob", "(null)") in ("(null)", "") for job in others)


def _tables(results: Path) -> dict[str, pl.DataFrame]:
    tables = {}
    for path in sorted(results.rglob("*.parquet")):
        relative = path.relative_to(results).as_posix()
        if relative.startswith("train/checkpoints/"):
            continue
        table = pl.read_parquet(path).drop(TIME_COLUMNS, strict=False)
        if relative == "train/metrics.parquet":
            measured = pl.col("name").is_in(TIME_METRICS) | pl.col("name").str.starts_with(MEASUREMENT_PREFIXES[0])
            measured |= pl.col("name").str.starts_with(MEASUREMENT_PREFIXES[1])
            table = table.filter(~measured)
        tables[relative] = table
    return tables


def test_outputs_equal_the_local_run(slurm_run, finished: Workflow) -> None:
    run = slurm_run[0]
    through_slurm = _tables(run.path("."))
    local = _tables(finished.path("."))
    # every table of the DAG's first half: the BARC tasks and parts, both parts' predictions and executions, the
    # refinement rows, the trainer's metrics
    assert len(local) > 30 and len(through_slurm) > 12 and set(through_slurm) <= set(local)
    parts = {"inference/barc/part1.parquet", "inference/barc/part2.parquet"}
    assert {*parts, "train/metrics.parquet"} <= set(through_slurm)
    differing = [relative for relative, table in through_slurm.items() if not local[relative].equals(table)]
    assert differing == [], f"tables that differ from the local run: {differing}"
    # the runs did real work: predictions were sampled, the trainer logged its loss
    assert local["inference/barc/part1.parquet"].height > 0
    assert "loss" in set(local["train/metrics.parquet"]["name"])
    for relative in WEIGHTS:
        assert run.path(relative).read_bytes() == finished.path(relative).read_bytes(), relative


def test_every_slurm_job_wrote_its_benchmark(slurm_run) -> None:
    """Benchmarks are written inside the Slurm jobs, one a job, each a measurement (the summary that gathers them
    is the local run's: tests/workflow/test_end_to_end.py)."""
    run, planned, _, _ = slurm_run
    assert run.benchmarked_jobs() == planned
    for path in run.path("benchmarks").rglob("*.tsv"):
        measured = pl.read_csv(path, separator="\t")
        assert measured.height == 1 and measured["s"][0] > 0, path
