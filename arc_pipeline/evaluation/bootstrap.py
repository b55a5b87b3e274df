"""Paired bootstrap over tasks: means with 95% intervals, shared by the canary's verdict and the search's tables."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95% bootstrap interval."""

    mean: float
    low: float
    high: float


def paired_bootstrap(values: dict[str, np.ndarray], samples: int, seed: int) -> dict[str, Estimate]:
    """Each array's mean with a 95% interval, every array resampled at the same tasks (the arrays are per task,
    in one task order): differences of paired arrays get honest intervals."""
    sizes = {array.shape[0] for array in values.values()}
    if len(sizes) > 1:
        raise ValueError(f"paired values need one task order; got lengths {sorted(sizes)}")
    tasks = sizes.pop() if sizes else 0
    rng = np.random.default_rng(seed)
    picks = rng.integers(tasks, size=(samples, tasks))
    estimates = {}
    for name, array in values.items():
        resampled = array[picks].mean(axis=1)
        low, high = np.quantile(resampled, [0.025, 0.975])
        estimates[name] = Estimate(float(array.mean()), float(low), float(high))
    return estimates
