"""How the stages' OpenMP threads wait, set before anything loads torch (arc_pipeline/cli.py).

torch's CPU kernels run on OpenMP threads that, by default, spin while they wait for each other. A stage
alone on its cores loses nothing to that, but Snakemake runs jobs side by side (and a workstation or a test
machine runs other work beside them): a spinning thread then burns the core that another process's thread,
or its own sibling, needs. Measured with ``benchmarks/cpu_wait_policy.py`` (benchmarks/README.md, "CPU
stages side by side"): on a 2-core machine the canary's GRPO step took 19.3 s beside a copy of itself when
the threads spun and 6.3 s when they slept (3.4 and 4.0 s alone). Waiting passively changes no arithmetic
(the same threads split the same work), so results stay bit-identical.

A value the user set (``OMP_WAIT_POLICY=ACTIVE`` for a dedicated node) is kept.
"""

from __future__ import annotations

import os

WAIT_POLICY_VARIABLE = "OMP_WAIT_POLICY"
SHARED_CORES_POLICY = "PASSIVE"


def wait_passively_unless_told() -> str:
    """Set OpenMP's wait policy to passive unless the environment already names one; the policy in force.
    Child processes (the vLLM engine, training ranks, sandbox workers) inherit it."""
    return os.environ.setdefault(WAIT_POLICY_VARIABLE, SHARED_CORES_POLICY)
