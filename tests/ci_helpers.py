"""Tests that need a system tool (Chromium, Slurm): skipped where it is missing, failed under CI.

CI (`.ci/run`, which sets CI=true) installs these tools with apt-get, so there a missing tool means a broken CI
setup, not a machine without the tool: the test fails instead of passing silently as skipped.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def tool_missing(message: str) -> NoReturn:
    """Skip with MESSAGE (one line); under CI, fail with it."""
    if under_ci():
        pytest.fail(f"{message}; CI=true, where .ci/run installs it", pytrace=False)
    pytest.skip(message)
