"""kill -9 of a stage, then a Snakemake rerun: the final outputs equal an uninterrupted run's, and nothing
the killed command left is ever a half-written file (issue 23).

Each trial copies the session's finished run, deletes one job's outputs, runs that job's command as
Snakemake ran it, SIGKILLs it after a delay drawn with a fixed seed, checks what it left, asks Snakemake
for the job's outputs and compares them with the finished run (tests/workflow/fault_helpers.py). This
is a representative subset; benchmarks/fault_injection.py runs every CPU stage at several points.
"""

from __future__ import annotations

import random

import pytest

from tests.workflow.conftest import Workflow
from tests.workflow.fault_helpers import Trial, finished_jobs, run_trial

pytestmark = pytest.mark.slow

RNG = random.Random(23)


@pytest.fixture(scope="module")
def jobs(finished_run: Workflow):
    return finished_jobs(finished_run)


def assert_survived(trial: Trial) -> None:
    assert trial.hit, f"the command ended before the signal ({trial.ran_s:.1f} s)"
    assert trial.exit_status == -9, trial.stderr_tail
    assert trial.half_written == [], "a killed command left an output that is not whole"
    assert trial.leftover_processes == 0, "processes the command started outlived it"
    assert trial.differences == [], "the rerun's outputs differ from the uninterrupted run's"
    assert trial.debris == [], "unfinished writes left files behind"


@pytest.mark.parametrize("rule", ["execute", "evaluate"])
def test_kill_9_then_rerun(finished_run, jobs, tmp_path, rule):
    # within the first second: imports done or not, tables being written or not; the command of
    # either stage runs longer than that here (execute ~2 s, evaluate ~4 s)
    trial = run_trial(finished_run, tmp_path / "run", jobs[rule], "SIGKILL", RNG.uniform(0.3, 1.0))
    assert_survived(trial)
    assert trial.rerun_jobs == f"{rule} x1" or trial.outputs_at_stop == len(jobs[rule].outputs)


def test_kill_9_during_training_resumes_to_the_same_adapter(finished_run, jobs, tmp_path):
    """Killed after its first checkpoint, training resumes from it and ends with the finished run's
    adapter (weights bit for bit) and metrics."""
    first = "results/train/checkpoints/checkpoint-1/trainer_state.json"
    trial = run_trial(finished_run, tmp_path / "run", jobs["train"], "SIGKILL", RNG.uniform(0.0, 0.5), after=first)
    assert_survived(trial)
    assert trial.rerun_jobs == "train x1"
    log = (trial.workdir / "results" / "logs" / "train.log").read_text()
    assert "resuming from results/train/checkpoints/checkpoint-1" in log
