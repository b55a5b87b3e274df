"""Suite-wide guard: tests run in temporary folders and never read or touch the user's own outputs.

A newcomer runs README command 1 (which fills ``results/``) and then command 2 in the same clone; the
tests must pass there and leave what command 1 made exactly as it was.

The tests that train or sample in this process wait for their OpenMP threads as the stages do
(arc_pipeline/cpu_threads.py): the suite runs workflows beside them on the same cores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arc_pipeline.cpu_threads import wait_passively_unless_told

wait_passively_unless_told()  # before any test module loads torch

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


@pytest.fixture(scope="session", autouse=True)
def cluster_set_resolution(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """pip's resolution of the cluster set from PyPI, started with the session's first test when the session runs
    tests/test_dependency_sets.py::test_cluster_set_resolves_on_pypi, which waits for it (minutes of network
    waits that the tests before it fill); None otherwise."""
    from tests.test_dependency_sets import RESOLVED_HERE, start_cluster_set_resolution

    wanted = any(item.name == "test_cluster_set_resolves_on_pypi" for item in request.session.items)
    if not (wanted and RESOLVED_HERE):
        yield None
        return
    started = start_cluster_set_resolution(tmp_path_factory.mktemp("cluster-set"))
    yield started
    started.stop()
