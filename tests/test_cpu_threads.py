"""The stages' OpenMP threads sleep while they wait, unless the user chose otherwise (arc_pipeline/cpu_threads.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from arc_pipeline.cpu_threads import WAIT_POLICY_VARIABLE, wait_passively_unless_told


def test_passive_unless_the_environment_names_a_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WAIT_POLICY_VARIABLE, raising=False)
    assert wait_passively_unless_told() == "PASSIVE"
    monkeypatch.setenv(WAIT_POLICY_VARIABLE, "ACTIVE")  # a dedicated node's choice is kept
    assert wait_passively_unless_told() == "ACTIVE"


def test_every_stage_process_and_its_children_get_it_before_torch_loads() -> None:
    """`arc-pipeline` sets it first thing, so the stage's own torch and every child (engine, ranks) read it."""
    probe = (
        "import os, sys\n"
        "from arc_pipeline import cli\n"
        "assert 'torch' not in sys.modules\n"
        "sys.argv = ['arc-pipeline', 'shard', '--help']\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != WAIT_POLICY_VARIABLE}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["PASSIVE", "False"], out.stdout + out.stderr
