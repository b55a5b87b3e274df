"""The one-node Slurm cluster of scripts/slurm_local.sh and the default DAG's run through it, for the Slurm test.

The run through Slurm is started in the background with the first workflow test of a session that runs the Slurm
tests (tests/workflow/conftest.py), not when they come: most of its wall time is waiting (the plugin's status
checks, sbatch, two Snakemake starts per job), so the canary's and the local run's work fills it. The Slurm tests
then wait for its end (tests/workflow/test_slurm.py).
"""

from __future__ import annotations

import copy
import logging
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.ci_helpers import tool_missing
from tests.workflow.conftest import REPO, Workflow

log = logging.getLogger(__name__)

SCRIPT = REPO / "scripts" / "slurm_local.sh"
SLURM_COMMANDS = ("slurmctld", "slurmd", "munged", "sbatch", "srun", "squeue", "scontrol")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/local/sbin"])
# no accounts and no slurmdbd on this cluster; finished jobs stay visible to squeue for an hour
RUN_ARGS = (
    "--slurm-no-account",
    "--slurm-status-command",
    "squeue",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--latency-wait",
    "10",
    "--retries",
    "0",
)
# The run shares the machine with the canary and the local run: twice the 40 minutes it was given alone.
RUN_TIMEOUT_S = 4800
# What the run through Slurm makes: the DAG up to the trained adapter (15 of the embedded default's 27 jobs: both
# BARC parts' first turns, the model, the refinement data, training), with jobs of every kind the cluster sees: the
# submit machine's download, CPU jobs, and the GPU rules inference and train. The evaluation half repeats those
# kinds (its GPU rules' requests are rendered and checked in tests/test_profiles.py) at about 16 s of CPU a job in
# Slurm's overhead alone (two Snakemake starts, sbatch, srun), which the suite's 2 cores cannot spare
# (docs/testing.md).
SLURM_TARGET = "train"


def root_slurm_or_skip() -> None:
    if os.geteuid() != 0:
        tool_missing("a local Slurm cluster needs root (scripts/slurm_local.sh runs its daemons as root)")
    missing = [name for name in SLURM_COMMANDS if not shutil.which(name, path=SEARCH_PATH)]
    if missing and not shutil.which("apt-get"):
        tool_missing(f"Slurm is not installed ({', '.join(missing)} missing) and there is no apt-get to install it")


def cluster(folder: Path) -> Iterator[dict[str, str]]:
    """Bring the cluster up in FOLDER, yield the environment that reaches it, stop it afterwards."""
    root_slurm_or_skip()
    env = {"SLURM_LOCAL_DIR": str(folder), "PATH": SEARCH_PATH, "SLURM_CONF": str(folder / "slurm.conf")}
    up = subprocess.run(
        ["bash", str(SCRIPT), "up"], env={**os.environ, **env}, capture_output=True, text=True, timeout=900
    )
    assert up.returncode == 0, f"scripts/slurm_local.sh up failed:\n{up.stdout}\n{up.stderr[-4000:]}"
    try:
        yield env
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env={**os.environ, **env}, capture_output=True, timeout=120)


def node_cpus(env: dict[str, str]) -> int:
    done = subprocess.run(
        ["sinfo", "--noheader", "--format=%c"], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[0])


def slurm_jobs(env: dict[str, str], run_id: str) -> list[dict[str, str]]:
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


def slurm_config(local: dict, env: dict[str, str]) -> dict:
    """The local run's config for Slurm. Only `cluster:` differs, which no rule's params hold: a GPU job asks for
    the node's CPUs (at most the default's 8) and 4 GB instead of 64 GB, so that it fits."""
    config = copy.deepcopy(local)
    config["cluster"]["gpu"].update(
        threads=min(config["cluster"]["gpu"]["threads"], node_cpus(env)), request_memory="4GB"
    )
    return config


class BackgroundRun:
    """`snakemake --profile profiles/slurm` on a workflow up to SLURM_TARGET, running while the session goes on."""

    def __init__(self, run: Workflow, env: dict[str, str]) -> None:
        self.run = run
        self.env = env
        # before it starts: afterwards the dry run would see its outputs
        self.planned = run.planned_jobs(SLURM_TARGET)
        self.output = run.workdir / "snakemake-slurm.log"
        self.process = run.start(*RUN_ARGS, SLURM_TARGET, profile="profiles/slurm", env=env, output=self.output)
        log.info("Slurm run started in %s (pid %d)", run.workdir, self.process.pid)

    def wait(self) -> tuple[Workflow, dict[str, int], list[dict[str, str]], str]:
        """Its end: the workflow, the planned jobs per rule, slurmctld's records of its jobs and its output."""
        try:
            returncode = self.process.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        output = self.output.read_text()
        assert returncode == 0, f"snakemake through Slurm failed ({returncode}):\n{output[-8000:]}"
        match = re.search(r"SLURM run ID: (\S+)", output)
        assert match, f"no SLURM run ID in the output:\n{output[-3000:]}"
        return self.run, self.planned, slurm_jobs(self.env, match.group(1)), output

    def stop(self) -> None:
        """Interrupt it if it still runs (a session that ends early): Snakemake cancels its Slurm jobs on SIGINT."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
