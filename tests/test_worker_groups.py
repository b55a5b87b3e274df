"""The two workers of `make test` (tests/conftest.py): the groups keep what shares fixtures together and the long
chains first. Checked on this session's own collection, in the order the workers take it."""

from __future__ import annotations

import pytest

from tests.conftest import CANARY_GROUP, CANARY_MODULE, RUNS_GROUP, SHARED_RUN_FIXTURES, WITH_THE_CANARY, worker_group


@pytest.fixture
def items(request: pytest.FixtureRequest) -> list[pytest.Item]:
    return request.session.items


def test_a_modules_tests_share_one_group(items) -> None:
    """Module fixtures are built once: a module never spans two groups (but for the test that waits beside the
    canary, whose module has no fixtures of its own)."""
    groups: dict[str, set[str]] = {}
    for item in items:
        if getattr(item, "originalname", item.name) not in WITH_THE_CANARY:
            groups.setdefault(item.nodeid.split("::")[0], set()).add(worker_group(item.nodeid))
    assert {module: found for module, found in groups.items() if len(found) > 1} == {}


def test_what_shares_the_default_run_runs_in_one_worker(items) -> None:
    """Every test that uses the embedded default's run (local or through Slurm) is in one group, so that one worker
    runs it once; the canary's tests are in another."""
    sharing = {item.nodeid: worker_group(item.nodeid) for item in items if SHARED_RUN_FIXTURES & set(item.fixturenames)}
    assert {nodeid: group for nodeid, group in sharing.items() if group != RUNS_GROUP} == {}
    canary = {worker_group(item.nodeid) for item in items if item.nodeid.startswith(CANARY_MODULE)}
    assert canary <= {CANARY_GROUP}


def test_the_long_chains_come_first(items) -> None:
    """The canary's group, then the default run's, before any other: each worker starts one of them at once."""
    order: list[str] = []
    for item in items:
        if not order or order[-1] != worker_group(item.nodeid):
            order.append(worker_group(item.nodeid))
    assert len(order) == len(set(order)), "a group's tests are not contiguous"
    present = [group for group in (CANARY_GROUP, RUNS_GROUP) if group in order]
    assert order[: len(present)] == present
