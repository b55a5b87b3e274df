"""A missing system tool skips a test on a developer's machine and fails it under CI (tests/ci_helpers.py)."""

from __future__ import annotations

import pytest

from tests.ci_helpers import tool_missing


@pytest.mark.parametrize("value", ["", "false", "0"])
def test_outside_ci_a_missing_tool_skips(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="chromium is not installed"):
        tool_missing("chromium is not installed")


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_under_ci_a_missing_tool_fails(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=r"slurmd is not installed; CI=true, where \.ci/run installs it"):
        tool_missing("slurmd is not installed")
