"""A preset given with --configfile stands alone: it never inherits the CPU default's values."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def train_config_json(*extra: str) -> dict:
    """The train job's config slice in a dry run, planned in a fresh folder (never the user's own results/)."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CONDOR_CONFIG="/dev/null")
    extra = tuple(str(REPO / arg) if arg.startswith("config/") else arg for arg in extra)
    with tempfile.TemporaryDirectory() as workdir:
        result = subprocess.run(
            [str(bin_dir / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", workdir,
             "train", "-n", "-p", "--cores", "1", *extra],
            cwd=workdir, capture_output=True, text=True, env=env, timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    command = next(line for line in (result.stdout + result.stderr).splitlines() if " train --dataset" in line)
    return json.loads(shlex.split(re.sub(r"^.*?arc-pipeline", "arc-pipeline", command))[-1])


def test_published_preset_does_not_inherit_the_cpu_default() -> None:
    preset = yaml.safe_load((REPO / "config" / "barc-multiturn.yaml").read_text())
    assert train_config_json("--configfile", "config/barc-multiturn.yaml") == preset["training"]


def test_without_configfile_the_embedded_default_applies() -> None:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert train_config_json() == default["training"]
