"""Helpers to run the real workflow with Snakemake in a temporary working directory."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import RESOLUTION_TEST

REPO = Path(__file__).resolve().parents[2]


class Workflow:
    def __init__(self, workdir: Path, config: dict) -> None:
        self.workdir = workdir
        self.config = config
        self.configfile = workdir / "config.yaml"
        self.write_config()

    def write_config(self) -> None:
        self.configfile.write_text(yaml.safe_dump(self.config))

    def path(self, relative: str) -> Path:
        return self.workdir / self.config["results_dir"] / relative

    def target(self, relative: str) -> str:
        """A target as Snakemake names it: relative to the working directory."""
        return f"{self.config['results_dir']}/{relative}"

    def _command(self, args: tuple[str, ...], profile: str, env: dict[str, str] | None) -> tuple[list, dict]:
        """The snakemake command line for ARGS and its environment: ENV added (its PATH after the virtualenv's)."""
        bin_dir = Path(sys.executable).parent
        extra = dict(env or {})
        path = extra.pop("PATH", os.environ["PATH"])
        full_env = dict(os.environ, **extra, PATH=f"{bin_dir}{os.pathsep}{path}")
        command = [
            str(bin_dir / "snakemake"),
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(self.workdir),
            "--configfile",
            str(self.configfile),
            "--profile",
            str(REPO / profile),
            *args,
        ]
        return command, full_env

    def snakemake(
        self,
        *args: str,
        check: bool = True,
        profile: str = "profiles/local",
        timeout: int = 1800,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """snakemake ARGS on this workflow; ENV adds variables (its PATH goes after the virtualenv's)."""
        command, full_env = self._command(args, profile, env)
        # from the working directory: executor plugins put their job logs relative to where snakemake starts
        result = subprocess.run(
            command, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=self.workdir
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"snakemake failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
            )
        return result

    def start(
        self, *args: str, output: Path, profile: str = "profiles/local", env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """snakemake ARGS started and left running, its stdout and stderr into OUTPUT (as `snakemake` runs it)."""
        command, full_env = self._command(args, profile, env)
        with output.open("w") as sink:  # the child keeps its own copy of the descriptor
            return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=full_env, cwd=self.workdir)

    def benchmarked_jobs(self) -> Counter[str]:
        """Benchmark files per rule: results/benchmarks/<rule>[/<job>].tsv (rules/common.smk, benchmark_path)."""
        folder = self.path("benchmarks")
        return Counter(path.relative_to(folder).parts[0].removesuffix(".tsv") for path in folder.rglob("*.tsv"))

    def planned_jobs(self, *targets: str) -> dict[str, int]:
        """Rule -> job count that a dry run would execute for these targets."""
        result = self.snakemake("-n", *targets)
        output = result.stdout + result.stderr
        if "Nothing to be done" in output:
            return {}
        stats = output.split("Job stats:", 1)[1]
        counts = {}
        for line in stats.splitlines():
            match = re.match(r"^(\w+)\s+(\d+)\s*$", line.strip())
            if match and match.group(1) != "total":
                counts[match.group(1)] = int(match.group(2))
        return counts


@pytest.fixture
def default_config() -> dict:
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


@pytest.fixture(scope="session")
def finished_run(finished: Workflow) -> Workflow:
    """The session's finished default run (``finished``), as the fault-injection tests name it: they read it and
    copy it, never change it."""
    return finished


@pytest.fixture
def workflow(tmp_path: Path, default_config: dict) -> Workflow:
    return Workflow(tmp_path, default_config)


@pytest.fixture(scope="session")
def finished(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """The embedded default run to its end with profiles/local (README's `make run`), once per test session
    (about 5 minutes on 2 cores): the end-to-end checks read it, and the Slurm run, started first, is compared
    with it."""
    start_in_the_background(request, "slurm_run_started")
    workflow = Workflow(tmp_path_factory.mktemp("e2e"), yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    workflow.snakemake()
    return workflow


# ------------------------------------------------------------------ the Slurm run (tests/workflow/test_slurm.py)
# The helpers import this module: they are imported where the fixtures need them.


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A running one-node cluster (scripts/slurm_local.sh) for the session; yields the environment to reach it."""
    from tests.workflow.slurm_cluster import cluster

    yield from cluster(tmp_path_factory.mktemp("slurm"))


@pytest.fixture(scope="session")
def slurm_run_started(slurm: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The embedded default's config (the `finished` run's) through Slurm up to its target (slurm_cluster.py,
    SLURM_TARGET), started and left running."""
    from tests.workflow.slurm_cluster import BackgroundRun, slurm_config

    config = slurm_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()), slurm)
    started = BackgroundRun(Workflow(tmp_path_factory.mktemp("slurm-run"), config), slurm)
    yield started
    started.stop()


def _waits_for(fixture: str, item: pytest.Item) -> bool:
    """Whether ITEM waits for the background work of session fixture FIXTURE."""
    if fixture == "slurm_run_started":
        return item.path.name == "test_slurm.py"
    return item.name == RESOLUTION_TEST


def in_a_worker() -> bool:
    """Whether this session is a pytest-xdist worker (`make test`, tests/conftest.py)."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def start_in_the_background(request: pytest.FixtureRequest, *fixtures: str) -> None:
    """Start the session fixtures FIXTURES whose work mostly waits, when the session runs tests that wait for them,
    so that it runs beside a workflow run: the run through Slurm (status checks, sbatch, Snakemake starts;
    tests/workflow/slurm_cluster.py) and pip's resolution of the cluster set (PyPI). One that cannot start is its own
    tests' failure or skip, not the caller's: pytest raises it again for them."""
    for fixture in fixtures:
        if not any(_waits_for(fixture, item) for item in request.session.items):
            continue
        try:
            request.getfixturevalue(fixture)
        except (Exception, pytest.skip.Exception, pytest.fail.Exception) as error:
            logging.getLogger(__name__).warning("%s did not start: %s", fixture, error)
