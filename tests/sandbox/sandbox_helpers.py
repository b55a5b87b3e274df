"""Helpers shared by the sandbox tests (a module of its own: several test folders have a conftest)."""

from __future__ import annotations

import numpy as np

from arc_pipeline.sandbox import ProgramResult, Sandbox, SandboxConfig

#: Short limits keep the hostile tests fast and light on this shared machine.
HOSTILE_CONFIG = SandboxConfig(workers=1, timeout_s=0.5, memory_mb=512)

GRID = np.array([[0, 1, 2], [3, 4, 5]], dtype=np.int8)

#: A program that checks the state every program must start from: pristine builtins, numpy, common,
#: seeded random generators. It returns a fixed grid only if everything is as it should be.
PROBE = """
import builtins, random, sys
import numpy as np
import common
def transform(grid):
    checks = [
        len([1, 2, 3]) == 3,
        list(range(3)) == [0, 1, 2],
        sorted([3, 1, 2]) == [1, 2, 3],
        np.array([1, 2]).sum() == 3,
        np.zeros((2, 2)).shape == (2, 2),
        np.add(1, 2) == 3,
        Color.RED == 2 and common.Color.RED == 2,
        crop(np.array([[0, 0], [0, 3]])).tolist() == [[3]],
        random.randint(0, 1000) == 864,
        np.random.randint(0, 1000) == 684,
        builtins.open is open,
        sys.modules["numpy"] is np,
        abs(-2) == 2 and max(1, 2) == 2 and isinstance(3, int),
    ]
    return np.array([[int(ok) for ok in checks]])
"""
PROBE_EXPECTED = [[1] * 13]


def assert_healthy(sandbox: Sandbox) -> None:
    """The next program starts from a pristine state and gets correct results."""
    result = sandbox.run(PROBE, [GRID])
    assert result.error_type is None, (result.error_type, result.error_message)
    assert result.outputs[0].tolist() == PROBE_EXPECTED


def ok_outputs(result: ProgramResult) -> list[list[list[int]]]:
    assert result.error_type is None, (result.error_type, result.error_message)
    return [grid.tolist() for grid in result.outputs]
