"""Unbiased pass@k (Chen et al. 2021): the chance that k of a task's n predictions, drawn without
replacement, include one of its c successful ones: ``1 - C(n - c, k) / C(n, k)``."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from arc_pipeline.scoring.tables import known_test_frame

SUCCESS_CRITERIA = ("solved", "test", "train")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Computed as a product (no huge binomials): 1 - prod_{i = n - c + 1}^{n} (1 - k / i)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def _success(criterion: str) -> pl.Expr:
    train = pl.col("train_is_correct").fill_null(False)
    test = pl.col("test_is_correct").fill_null(False)
    if criterion == "solved":
        return train & test
    if criterion == "test":
        return test
    if criterion == "train":
        return train
    raise ValueError(f"unknown success criterion {criterion!r}; choose one of {SUCCESS_CRITERIA}")


def task_counts(
    executions: pl.DataFrame, success: str = "solved", test_known: Mapping[str, bool] | None = None
) -> pl.DataFrame:
    """Per task: ``n`` predictions and ``c`` successful ones. Criteria: ``solved`` (train and test
    right), ``test`` or ``train``; tasks without test solutions are left out unless ``train``."""
    counts = executions.group_by("task_id", maintain_order=True).agg(
        pl.len().alias("n"), _success(success).sum().alias("c")
    )
    if success != "train":
        known = known_test_frame(executions, test_known).filter(pl.col("_test_known")).select("task_id")
        counts = counts.join(known, on="task_id", how="semi", maintain_order="left")
    return counts


def pass_at_k_curve(
    executions: pl.DataFrame, success: str = "solved", test_known: Mapping[str, bool] | None = None
) -> pl.DataFrame:
    """Mean pass@k over tasks for k = 1..n (n = the fewest predictions any task has): columns k, pass_at_k."""
    counts = task_counts(executions, success, test_known)
    if counts.height == 0:
        return pl.DataFrame(schema={"k": pl.Int64, "pass_at_k": pl.Float64})
    max_k = int(counts["n"].min())
    pairs = list(zip(counts["n"].to_list(), counts["c"].to_list()))
    curve = [sum(pass_at_k(n, c, k) for n, c in pairs) / len(pairs) for k in range(1, max_k + 1)]
    return pl.DataFrame(
        {"k": list(range(1, max_k + 1)), "pass_at_k": curve}, schema={"k": pl.Int64, "pass_at_k": pl.Float64}
    )
