"""Suite-wide guard: tests run in temporary folders and never read or touch the user's own outputs.

A newcomer runs README command 1 (which fills ``results/``) and then command 2 in the same clone; the
tests must pass there and leave what command 1 made exactly as it was.

The tests that train or sample in this process wait for their OpenMP threads as the stages do
(arc_pipeline/cpu_threads.py): the suite runs workflows beside them on the same cores.

`make test` runs the suite in two pytest-xdist workers (`PYTEST_WORKERS`); the groups below decide what runs where
and in which order (one process runs them in the same order).
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
    canary's fixture starts it (tests/workflow/test_canary.py), so that its minutes of network waits run beside the
    canary; None where the set is not resolved (RESOLVED_HERE)."""
    from tests.test_dependency_sets import RESOLVED_HERE, start_cluster_set_resolution

    if not RESOLVED_HERE:
        yield None
        return
    started = start_cluster_set_resolution(tmp_path_factory.mktemp("cluster-set"))
    yield started
    started.stop()


# ------------------------------------------------------------------ two workers (`make test`)
# `make test` runs two pytest-xdist workers with --dist loadscope (PYTEST_WORKERS), and the scopes are the
# groups below (the scheduler in pytest_xdist_make_scheduler): a group's tests run in one worker, in collection
# order, and a worker takes the next group when it is nearly done with its own. The two longest chains of work go
# first, one to each worker: the canary (its whole DAG, with the waiting test whose work starts beside it) and the
# embedded default's run with the tests that share it (end to end, the fault trials, the run through Slurm compared
# with it). Then the groups with slow tests (engines, training), the longest first, then the quick ones.
# docs/testing.md: the figures.
CANARY_GROUP = "canary"
RUNS_GROUP = "workflow-runs"
CANARY_MODULE = "tests/workflow/test_canary.py"
# the test that waits for pip's resolution, which the canary's fixture starts (tests/workflow/test_canary.py)
RESOLUTION_TEST = "test_cluster_set_resolves_on_pypi"
WITH_THE_CANARY = {RESOLUTION_TEST}
# the modules whose tests use the embedded default's runs (SHARED_RUN_FIXTURES; tests/test_worker_groups.py)
RUNS_MODULES = {
    "tests/workflow/test_end_to_end.py",
    "tests/workflow/test_kill_and_rerun.py",
    "tests/workflow/test_slurm.py",
}
SHARED_RUN_FIXTURES = {"finished", "finished_run", "slurm", "slurm_run_started"}
# directories whose conftest holds a session-scoped fixture that a second worker would build again
SESSION_FIXTURE_DIRS = {"tests/training", "tests/domain"}


def worker_group(nodeid: str) -> str:
    """The group of the test NODEID: the canary's, the default run's, a directory with session fixtures, or its
    module (so that module fixtures are built once)."""
    module, _, name = nodeid.partition("::")
    if module == CANARY_MODULE or name.split("[")[0] in WITH_THE_CANARY:
        return CANARY_GROUP
    if module in RUNS_MODULES:
        return RUNS_GROUP
    folder = module.rpartition("/")[0]
    for shared in SESSION_FIXTURE_DIRS:  # its subfolders too (tests/training/speed, ...)
        if folder == shared or folder.startswith(shared + "/"):
            return shared
    return module


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The collection in the order the workers take it: the groups contiguous, the long ones first."""
    groups = {item.nodeid: worker_group(item.nodeid) for item in items}
    sizes = Counter(groups.values())
    slow = Counter(groups[item.nodeid] for item in items if item.get_closest_marker("slow"))

    def rank(item: pytest.Item) -> tuple[int, int]:
        group = groups[item.nodeid]
        if group == CANARY_GROUP:  # the canary's module first: its fixture starts the background work
            return (0, 0) if item.nodeid.startswith(CANARY_MODULE) else (1, 0)
        if group == RUNS_GROUP:
            return (2, 0)
        return (3, -slow[group]) if slow[group] else (4, -sizes[group])  # the longest first, by their counts

    items.sort(key=rank)  # stable: a group's tests stay in collection order


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under --dist loadscope, the scopes are worker_group's groups, taken in collection order (run with
    --no-loadscope-reorder); other modes stay xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return GroupScheduling(config, log)
