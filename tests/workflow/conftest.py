"""Helpers to run the real workflow with Snakemake in a temporary working directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

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

    def snakemake(
        self,
        *args: str,
        check: bool = True,
        profile: str = "profiles/local",
        timeout: int = 1800,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """snakemake ARGS on this workflow; ENV adds variables (its PATH goes after the virtualenv's)."""
        bin_dir = Path(sys.executable).parent
        extra = dict(env or {})
        path = extra.pop("PATH", os.environ["PATH"])
        env = dict(os.environ, **extra, PATH=f"{bin_dir}{os.pathsep}{path}")
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
        # from the working directory: executor plugins put their job logs relative to where snakemake starts
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=self.workdir)
        if check and result.returncode != 0:
            raise AssertionError(
                f"snakemake failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
            )
        return result

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
def finished(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """The embedded default run to its end with profiles/local (README's `make run`), once per test session
    (about 6 minutes on 2 cores): the end-to-end checks read it, and the Slurm run is compared with it."""
    workflow = Workflow(tmp_path_factory.mktemp("e2e"), yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    workflow.snakemake()
    return workflow
