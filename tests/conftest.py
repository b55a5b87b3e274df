"""Suite-wide guard: tests run in temporary folders and never read or touch the user's own outputs.

A newcomer runs README command 1 (which fills ``results/``) and then command 2 in the same clone; the
tests must pass there and leave what command 1 made exactly as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    if not folder.exists():
        return {}
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file()
    }


@pytest.fixture(scope="session", autouse=True)
def users_results_untouched():
    folders = [REPO / "results"]
    before = {folder: _snapshot(folder) for folder in folders}
    yield
    for folder in folders:
        assert _snapshot(folder) == before[folder], f"the tests changed {folder}"
