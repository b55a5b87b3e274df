"""Metric tables from executions (docs/scoring.md), with polars, and their markdown.

* :func:`task_metrics`: one row per task (``METRICS_SCHEMA``); :func:`task_means` their MEAN, which
  :func:`with_mean_row` appends for display (the markdown tables), never to the per-task parquet.
* :func:`error_table` / :func:`common_errors`: the share of each error type per task, and the most
  common errors overall. Error table columns come only from the closed ERROR_TYPE_COLUMNS (other
  names count as "other"); the raw name a program chose is only ever a cell value.
* :func:`summary_row` / :func:`runs_table`: one row per run for the evaluation (docs/defaults.md).
* :func:`to_markdown`: the published tables' formatting: shares as percentages with one decimal ("99.9%").

Failed predictions count 0 in every mean. Whether a task's test solutions are known is passed in
(``test_known``); without it a task counts as unknown when it has valid outputs but none scored on
test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from arc_pipeline.schemas import (
    ALWAYS_ERROR_TYPES,
    ERROR_TYPE_COLUMNS,
    KNOWN_ERROR_TYPES,
    OTHER_ERROR_TYPE,
    TASK_METRIC_COLUMNS,
)

MEAN_LABEL = "MEAN"
INTEGER_COLUMNS = frozenset({"n_preds", "count", "tasks", "initial", "refinement", "dropped prompts"})
# columns of an executions frame the tables read (lets callers read only these from a big parquet)
EXECUTION_COLUMNS = (
    "task_id",
    "has_code",
    "error_type",
    "error_message",
    "fingerprint",
    "train_pixel_score",
    "train_correct_grids",
    "train_is_correct",
    "test_pixel_score",
    "test_correct_grids",
    "test_is_correct",
)
MESSAGE_CHARS = 120


def known_test_frame(executions: pl.DataFrame, test_known: Mapping[str, bool] | None) -> pl.DataFrame:
    """Columns ``task_id``, ``_test_known``: given, or inferred (unknown = valid outputs, none scored on test)."""
    if test_known is not None:
        missing = sorted(set(executions["task_id"].unique().to_list()) - set(test_known))
        if missing:
            raise ValueError(f"test_known has no entry for task(s) {missing[:5]}")
        return pl.DataFrame(
            {"task_id": list(test_known), "_test_known": list(test_known.values())},
            schema={"task_id": pl.String, "_test_known": pl.Boolean},
        )
    valid = pl.col("error_type").is_null()
    scored_on_test = (valid & pl.col("test_pixel_score").is_not_null()).any()
    return executions.group_by("task_id").agg((scored_on_test | (~valid).all()).alias("_test_known"))


def with_mean_row(table: pl.DataFrame, label_column: str = "task_id") -> pl.DataFrame:
    """``table`` with a last ``MEAN`` row averaging every other column over its rows (nulls left out)."""
    if table.height == 0:  # no tasks (e.g. a refinement run with no prompt): no mean to state
        return table
    means = table.select(pl.lit(MEAN_LABEL).alias(label_column), pl.exclude(label_column).cast(pl.Float64).mean())
    return pl.concat([table, means], how="vertical_relaxed")


def task_metrics(executions: pl.DataFrame, test_known: Mapping[str, bool] | None = None) -> pl.DataFrame:
    """Per-task metrics (columns ``task_id`` + TASK_METRIC_COLUMNS), one row per task and nothing else:
    a MEAN row is no task (:func:`task_means` / :func:`with_mean_row` give it).

    ``test_known`` maps a task id to whether its test solutions are known; unknown tasks get null
    test columns, ``is_correct`` and ``solved``.
    """
    known = known_test_frame(executions, test_known)
    rows = (
        executions.join(known, on="task_id", how="left")
        .with_columns(
            pl.col("train_pixel_score").fill_null(0.0).alias("_train_pixel"),
            pl.col("train_correct_grids").fill_null(0.0).alias("_train_correct"),
            pl.col("train_is_correct").fill_null(False).cast(pl.Float64).alias("_train_ok"),
            *[
                pl.when(pl.col("_test_known")).then(expr).otherwise(None).alias(name)
                for name, expr in (
                    ("_test_pixel", pl.col("test_pixel_score").fill_null(0.0)),
                    ("_test_correct", pl.col("test_correct_grids").fill_null(0.0)),
                    ("_test_ok", pl.col("test_is_correct").fill_null(False).cast(pl.Float64)),
                )
            ],
        )
        .with_columns((pl.col("_train_ok") * pl.col("_test_ok")).alias("_solved"))
    )
    n = pl.len().cast(pl.Float64)
    table = (
        rows.group_by("task_id", maintain_order=True)
        .agg(
            n.alias("n_preds"),
            pl.col("has_code").cast(pl.Float64).mean().alias("valid code"),
            pl.col("error_type").is_null().cast(pl.Float64).mean().alias("valid outputs"),
            (pl.col("fingerprint").drop_nulls().n_unique() / n).alias("unique outputs"),
            pl.col("_train_pixel").mean().alias("train_pixel_score"),
            pl.col("_train_correct").mean().alias("train_correct_grids"),
            pl.col("_train_ok").mean().alias("train_pass_rate"),
            pl.col("_train_ok").max().alias("train_is_correct"),
            pl.col("_test_pixel").mean().alias("test_pixel_score"),
            pl.col("_test_correct").mean().alias("test_correct_grids"),
            pl.col("_test_ok").mean().alias("test_pass_rate"),
            pl.col("_test_ok").max().alias("test_is_correct"),
            pl.col("_solved").max().alias("solved"),
        )
        .with_columns((pl.col("train_is_correct") * pl.col("test_is_correct")).alias("is_correct"))
    )
    return table.select("task_id", *TASK_METRIC_COLUMNS).with_columns(pl.exclude("task_id").cast(pl.Float64))


def task_means(metrics: pl.DataFrame) -> dict[str, Any]:
    """The MEAN over the tasks of a :func:`task_metrics` table, as a dict (without task_id)."""
    if metrics.height == 0:
        raise ValueError("metrics table has no task: no mean to state")
    if MEAN_LABEL in metrics["task_id"].to_list():
        raise ValueError(f"metrics table has a {MEAN_LABEL} row among its tasks (written by an older version?)")
    return with_mean_row(metrics).drop("task_id").row(-1, named=True)


def mean_row(metrics: pl.DataFrame) -> dict[str, Any]:
    """The ``MEAN`` row of a table that carries one (:func:`error_table`) as a dict (without task_id)."""
    row = metrics.filter(pl.col("task_id") == MEAN_LABEL)
    if row.height != 1:
        raise ValueError(f"metrics table has {row.height} {MEAN_LABEL} rows, expected 1")
    return row.drop("task_id").row(0, named=True)


def error_class(column: str = "error_type") -> pl.Expr:
    """``column`` mapped onto ERROR_TYPE_COLUMNS: known names kept, any other name "other", null kept."""
    raw = pl.col(column)
    return (
        pl.when(raw.is_null())
        .then(pl.lit(None, dtype=pl.String))
        .when(raw.is_in(list(KNOWN_ERROR_TYPES)))
        .then(raw)
        .otherwise(pl.lit(OTHER_ERROR_TYPE))
    )


def _check_columns(names: Sequence[str]) -> None:
    unknown = [name for name in names if name not in ERROR_TYPE_COLUMNS]
    if unknown:
        raise ValueError(f"error types {unknown[:3]!r} are not in ERROR_TYPE_COLUMNS")


def error_types_in_order(executions: pl.DataFrame, always: Sequence[str] = ALWAYS_ERROR_TYPES) -> list[str]:
    """``always`` first, then every other error class that occurs, most frequent first (then by name)."""
    _check_columns(always)
    counts = (
        executions.select(error_class().alias("error_class"))
        .drop_nulls()
        .group_by("error_class")
        .agg(pl.len().alias("n"))
        .sort(["n", "error_class"], descending=[True, False])
    )
    others = [name for name in counts["error_class"].to_list() if name not in always]
    return [*always, *others]


def error_table(executions: pl.DataFrame, always: Sequence[str] = ALWAYS_ERROR_TYPES) -> pl.DataFrame:
    """Per task the share of its predictions with each error class, then a ``MEAN`` row.

    Its schema is ``errors_schema(error_types_in_order(executions))``.
    """
    types = error_types_in_order(executions, always)
    classes = error_class()
    table = executions.group_by("task_id", maintain_order=True).agg(
        pl.len().cast(pl.Float64).alias("n_preds"),
        *[(classes == name).fill_null(False).cast(pl.Float64).mean().alias(name) for name in types],
    )
    return with_mean_row(table)


def _message_summary() -> pl.Expr:
    """The last non-empty line of an error message, truncated (where exceptions name their cause)."""
    last_line = (
        pl.col("error_message")
        .fill_null("")
        .str.strip_chars()
        .str.split("\n")
        .list.last()
        .fill_null("")
        .str.strip_chars()
    )
    return (
        pl.when(last_line.str.len_chars() > MESSAGE_CHARS)
        .then(last_line.str.slice(0, MESSAGE_CHARS - 3) + "...")
        .otherwise(last_line)
    ).alias("message")


def common_errors(executions: pl.DataFrame, top: int = 20) -> pl.DataFrame:
    """The ``top`` most common (error type, message) pairs overall (``COMMON_ERRORS_SCHEMA``)."""
    total = max(executions.height, 1)
    return (
        executions.filter(pl.col("error_type").is_not_null())
        .with_columns(_message_summary())
        .group_by("error_type", "message")
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("task_id").n_unique().cast(pl.Int64).alias("tasks"))
        .with_columns((pl.col("count") / total).alias("share"))
        .sort(["count", "error_type", "message"], descending=[True, False, False])
        .head(top)
        .select("error_type", "message", "count", "share", "tasks")
    )


def summary_row(
    metrics: pl.DataFrame, labels: Mapping[str, Any], include_n_preds: bool = False, include_solved: bool = True
) -> pl.DataFrame:
    """One run as one row: the ``labels`` columns (e.g. initial, refinement, model), then its MEAN metrics."""
    means = task_means(metrics)
    columns = [
        name
        for name in TASK_METRIC_COLUMNS
        if (include_n_preds or name != "n_preds") and (include_solved or name != "solved")
    ]
    return pl.DataFrame([{**labels, **{name: means[name] for name in columns}}])


def runs_table(rows: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """Stack :func:`summary_row` results (columns missing from a row become null)."""
    return pl.concat(list(rows), how="diagonal_relaxed")


def _format_cell(value: Any, column: str, dtype: pl.DataType) -> str:
    if value is None:
        return "-"
    if column in INTEGER_COLUMNS and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    if dtype.is_float():
        return f"{value:.1%}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(table: pl.DataFrame) -> str:
    """A markdown table as in the published results: float columns as percentages with one decimal ("99.9%"),
    counts (n_preds, count, tasks, initial, refinement) as integers, nulls as "-"."""
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "---|" * len(table.columns)
    dtypes = dict(zip(table.columns, table.dtypes))
    lines = [header, rule]
    for row in table.iter_rows(named=True):
        lines.append("| " + " | ".join(_format_cell(row[c], c, dtypes[c]) for c in table.columns) + " |")
    return "\n".join(lines) + "\n"


def errors_markdown(errors: pl.DataFrame, common: pl.DataFrame) -> str:
    """Both error tables in one markdown document."""
    return (
        "## Share of each error type per task\n\n"
        + to_markdown(errors)
        + "\n## Most common errors overall\n\n"
        + to_markdown(common)
    )
