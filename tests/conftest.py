"""Suite-wide guard: tests run in temporary folders and never read or touch the user's own outputs.

A newcomer runs README command 1 (which fills ``results/``) and then command 2 in the same clone; the
tests must pass there and leave what command 1 made exactly as it was.

The tests that train or sample in this process wait for their OpenMP threads as the stages do
(arc_pipeline/cpu_threads.py): the suite runs workflows beside them on the same cores.

`make test` runs the suite in two pytest-xdist workers; the groups below decide what runs where and in which order.
"""

from __future__ import annotations

from collections import Counter
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


@pytest.fixture(scope="session")
def cluster_set_resolution(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """pip's resolution of the cluster set from PyPI for tests/test_dependency_sets.py, which waits for it. The
    workflow group starts it with its first test (tests/workflow/conftest.py), so that its minutes of network
    waits run beside the canary; None where the set is not resolved (RESOLVED_HERE)."""
    from tests.test_dependency_sets import RESOLVED_HERE, start_cluster_set_resolution

    if not RESOLVED_HERE:
        yield None
        return
    started = start_cluster_set_resolution(tmp_path_factory.mktemp("cluster-set"))
    yield started
    started.stop()


# ------------------------------------------------------------------ two workers (`make test`: pytest -n 2)
# `make test` runs pytest-xdist with --dist loadgroup: a group's tests run in one worker, in collection order, and
# a worker takes the next group when it is nearly done with its own. The two longest chains of work go first, one
# to each worker: the canary (its whole DAG, with the waiting test whose work starts beside it) and the embedded
# default's run with what shares it (the end-to-end and fault tests, the run through Slurm that is compared with
# it). Then the groups with slow tests (engines, training), then the quick ones. docs/testing.md has the figures.
CANARY_GROUP = "canary"
RUNS_GROUP = "workflow-runs"
CANARY_MODULE = "workflow/test_canary.py"
# tests that wait on work started beside the canary (tests/workflow/conftest.py)
WITH_THE_CANARY = {"test_cluster_set_resolves_on_pypi"}
# the session fixtures of the embedded default's runs (tests/workflow/conftest.py)
SHARED_RUN_FIXTURES = {"finished", "finished_run", "slurm", "slurm_run_started"}
# directories whose conftest holds a session-scoped fixture that a second worker would build again
SESSION_FIXTURE_DIRS = {"training", "domain"}
GROUP = pytest.StashKey[str]()


def _module_group(module: Path, items: list[pytest.Item]) -> str:
    relative = module.relative_to(REPO / "tests")
    if relative.as_posix() == CANARY_MODULE:
        return CANARY_GROUP
    if any(SHARED_RUN_FIXTURES & set(item.fixturenames) for item in items):
        return RUNS_GROUP
    if len(relative.parts) > 1 and relative.parts[0] in SESSION_FIXTURE_DIRS:
        return relative.parts[0]
    return relative.as_posix()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    for module, module_items in modules.items():
        group = _module_group(module, module_items)
        for item in module_items:
            with_the_canary = getattr(item, "originalname", item.name) in WITH_THE_CANARY
            item.stash[GROUP] = CANARY_GROUP if with_the_canary else group
    sizes = Counter(item.stash[GROUP] for item in items)
    slow = Counter(item.stash[GROUP] for item in items if item.get_closest_marker("slow"))

    def rank(item: pytest.Item) -> tuple[int, int]:
        group = item.stash[GROUP]
        if group == CANARY_GROUP:  # the canary's module first: its fixture starts the background work
            return (0, 0) if item.path == REPO / "tests" / CANARY_MODULE else (1, 0)
        if group == RUNS_GROUP:
            return (2, 0)
        return (3, -slow[group]) if slow[group] else (4, -sizes[group])  # the longest first, by their counts

    items.sort(key=rank)  # stable: a group's tests stay in collection order
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        for item in items:
            item.add_marker(pytest.mark.xdist_group(item.stash[GROUP]))
