"""The whole embedded default DAG through a real Slurm scheduler (slow: about 7 minutes on 2 cores).

scripts/slurm_local.sh brings up a one-node cluster on this machine (munged, slurmctld, slurmd; the node declares
the machine's CPUs and memory and one GPU that is only counted). Snakemake runs with profiles/slurm, as a user
on a cluster would, so every job goes through sbatch and runs as an srun step of its allocation. Checked:

* every job of the DAG ran as a Slurm job that completed (slurmctld's own records, `scontrol show job`, and
  each job's Slurm log); only the rule meant to run on the submit machine (barc_download) did not;
* the GPU rules' jobs held a GPU (`--gpus=1`, slurmctld's TresPerJob), no other job did;
* the outputs equal those of the local run of the same config (the session's `finished` run), compared as
  data, table by table (which tables, and why they can be equal: the comment above TIME_COLUMNS).

Needs root (the daemons run as root) and Slurm, which the script installs with apt-get where it is missing.
Without root or apt the test skips in one line; under CI (CI=true) it fails instead.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from tests.ci_helpers import tool_missing
from tests.test_profiles import GPU_RULES
from tests.workflow.conftest import REPO, Workflow

pytestmark = pytest.mark.slow

SCRIPT = REPO / "scripts" / "slurm_local.sh"
SLURM_COMMANDS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scontrol")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin"])
SUBMIT_MACHINE_RULES = {"barc_download"}  # localrules: the hub download needs the internet
# Compared with the local run: every parquet table the run leaves in results/ (the data of every stage, from the
# BARC tasks to the evaluation's tables; train/checkpoints, the trainer's own state, aside), and the weights of
# the built model and of the trained adapter, byte for byte. A rerun of the same config reproduces them all: the
# data stages are seeded, vLLM samples with a seed per request (inference.seed) and GRPO on CPU is seeded
# (train.seed), with the same thread count in both runs (cluster.gpu.threads). Dropped are only measurements
# of time: the execution's per-program duration and the trainer's timing metrics.
TIME_COLUMNS = {"duration_s"}
TIME_METRICS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
WEIGHTS = ("model/base/model.safetensors", "train/adapter/adapter_model.safetensors")


def _root_slurm_or_skip() -> None:
    if os.geteuid() != 0:
        tool_missing("a local Slurm cluster needs root (scripts/slurm_local.sh runs its daemons as root)")
    missing = [name for name in SLURM_COMMANDS if not shutil.which(name, path=SEARCH_PATH)]
    if missing and not shutil.which("apt-get"):
        tool_missing(f"Slurm is not installed ({', '.join(missing)} missing) and there is no apt-get to install it")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """A running one-node cluster for this module, stopped afterwards; yields the environment to reach it."""
    _root_slurm_or_skip()
    folder = tmp_path_factory.mktemp("slurm")
    env = {"SLURM_LOCAL_DIR": str(folder), "PATH": SEARCH_PATH, "SLURM_CONF": str(folder / "slurm.conf")}
    up = subprocess.run(
        ["bash", str(SCRIPT), "up"], env={**os.environ, **env}, capture_output=True, text=True, timeout=900
    )
    assert up.returncode == 0, f"scripts/slurm_local.sh up failed:\n{up.stdout}\n{up.stderr[-4000:]}"
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env={**os.environ, **env}, capture_output=True, timeout=120)


def _node_cpus(env: dict[str, str]) -> int:
    done = subprocess.run(
        ["sinfo", "--noheader", "--format=%c"], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[0])


def _slurm_jobs(env: dict[str, str], run_id: str) -> list[dict[str, str]]:
    """slurmctld's records of this run's jobs (it keeps finished jobs for MinJobAge, an hour here)."""
    done = subprocess.run(
        ["scontrol", "show", "job", "--oneliner"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    records = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in done.stdout.splitlines() if line.strip()]
    return [record for record in records if record.get("JobName") == run_id]


def _rule_of(comment: str, rules: set[str]) -> str:
    """The plugin's job comment is rule_<rule> or rule_<rule>_wildcards_<values>."""
    matches = [r for r in rules if comment == f"rule_{r}" or comment.startswith(f"rule_{r}_wildcards_")]
    assert len(matches) == 1, f"comment {comment!r} names no single rule of {sorted(rules)}"
    return matches[0]


@pytest.fixture(scope="module")
def slurm_run(slurm: dict[str, str], finished: Workflow, tmp_path_factory: pytest.TempPathFactory):
    """The config of the local run, through Slurm. Only `cluster:` differs, which no rule's params hold: a
    GPU job asks for the node's CPUs (at most the default's 8) and 4 GB instead of 64 GB, so that it fits."""
    config = copy.deepcopy(finished.config)
    config["cluster"]["gpu"].update(
        threads=min(config["cluster"]["gpu"]["threads"], _node_cpus(slurm)), request_memory="4GB"
    )
    run = Workflow(tmp_path_factory.mktemp("slurm-run"), config)
    planned = run.planned_jobs()
    result = run.snakemake(
        # no accounts and no slurmdbd on this cluster; finished jobs stay visible to squeue for an hour
        "--slurm-no-account",
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--latency-wait",
        "10",
        "--retries",
        "0",
        profile="profiles/slurm",
        env=slurm,
        timeout=2400,
    )
    output = result.stdout + result.stderr
    match = re.search(r"SLURM run ID: (\S+)", output)
    assert match, f"no SLURM run ID in the output:\n{output[-3000:]}"
    return run, planned, _slurm_jobs(slurm, match.group(1)), output


def test_every_job_ran_as_a_completed_slurm_job(slurm_run) -> None:
    run, planned, jobs, _ = slurm_run
    expected = {rule: n for rule, n in planned.items() if rule != "all" and rule not in SUBMIT_MACHINE_RULES}
    assert set(planned) - set(expected) == {"all", *SUBMIT_MACHINE_RULES}
    per_rule = Counter(_rule_of(job["Comment"], set(planned)) for job in jobs)
    assert dict(per_rule) == expected
    assert {(job["JobState"], job["ExitCode"]) for job in jobs} == {("COMPLETED", "0:0")}
    for job in jobs:  # the plugin's log of each job (profiles/slurm keeps them)
        logs = list((run.workdir / "logs" / "slurm").rglob(f"{job['JobId']}.log"))
        assert len(logs) == 1 and "Finished jobid" in logs[0].read_text(), job["JobId"]


def test_gpu_rules_held_a_gpu(slurm_run) -> None:
    _, planned, jobs, _ = slurm_run
    holding = {_rule_of(job["Comment"], set(planned)) for job in jobs if job.get("TresPerJob") == "gres:gpu:1"}
    assert holding == GPU_RULES
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
            table = table.filter(~pl.col("name").is_in(TIME_METRICS))
        tables[relative] = table
    return tables


def test_outputs_equal_the_local_run(slurm_run, finished: Workflow) -> None:
    run = slurm_run[0]
    through_slurm = _tables(run.path("."))
    local = _tables(finished.path("."))
    assert sorted(through_slurm) == sorted(local)
    assert len(local) > 30 and {"inference/barc/part1.parquet", "train/metrics.parquet"} <= set(local)
    differing = [relative for relative, table in local.items() if not through_slurm[relative].equals(table)]
    assert differing == [], f"tables that differ from the local run: {differing}"
    # the runs did real work: predictions were sampled, the trainer logged its loss
    assert local["inference/barc/part1.parquet"].height > 0
    assert "loss" in set(local["train/metrics.parquet"]["name"])
    for relative in WEIGHTS:
        assert run.path(relative).read_bytes() == finished.path(relative).read_bytes(), relative


def test_every_slurm_job_wrote_its_benchmark(slurm_run) -> None:
    """Benchmarks are written inside the Slurm jobs; the summary gathers them as after a local run."""
    run, planned, _, _ = slurm_run
    assert run.benchmarked_jobs() == {rule: n for rule, n in planned.items() if rule != "all"}
    summary = run.path("benchmarks/summary.md").read_text()
    assert all(f"| {rule} |" in summary for rule in planned if rule not in ("all", "benchmark_summary"))
