"""Shared sandboxes for the sandbox tests: started once per module, since a worker takes ~0.5 s."""

from __future__ import annotations

import pytest
from sandbox_helpers import HOSTILE_CONFIG

from arc_pipeline.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(workers=2, timeout_s=1.0)) as box:
        yield box


@pytest.fixture(scope="module", params=["audit-hook", "kernel-only"])
def hostile_sandbox(request):
    """Every hostile program runs twice: with the audit hook, and with only the kernel's enforcement."""
    with Sandbox(HOSTILE_CONFIG, audit_hook=request.param == "audit-hook") as box:
        if request.param == "kernel-only" and box.mechanisms["seccomp"].startswith("off"):
            # without seccomp a fork bomb would really run: test the kernel layer only where it exists
            pytest.skip(f"seccomp is not available here: {box.mechanisms['seccomp']}")
        box.layer = request.param
        yield box
