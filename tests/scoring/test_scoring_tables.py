"""Metric and error tables on a hand-built fixture, against hand-computed numbers."""

import polars as pl
import pytest
from scoring_helpers import TEST_KNOWN, fixture_executions

from arc_pipeline.io import write_table
from arc_pipeline.schemas import METRICS_SCHEMA, TASK_METRIC_COLUMNS, errors_schema
from arc_pipeline.scoring.tables import (
    common_errors,
    error_table,
    errors_markdown,
    runs_table,
    summary_row,
    task_means,
    task_metrics,
    to_markdown,
    with_mean_row,
)

EXPECTED = {
    #       n  code valid uniq trpix trcor trpass tris  tepix tecor tepass teis  is    solved
    "A": (5, 0.8, 0.6, 0.4, 0.4, 0.3, 0.2, 1.0, 0.5, 0.4, 0.4, 1.0, 1.0, 1.0),
    "B": (2, 1.0, 1.0, 1.0, 0.75, 0.5, 0.5, 1.0, 0.6, 0.5, 0.5, 1.0, 1.0, 0.0),
    "C": (2, 1.0, 0.5, 0.5, 0.25, 0.25, 0.0, 0.0, None, None, None, None, None, None),
}


def _mean(values):
    present = [v for v in values if v is not None]
    return sum(present) / len(present)


@pytest.mark.parametrize("test_known", [TEST_KNOWN, None])  # None: inferred from the rows
def test_task_metrics_match_hand_computed(test_known, tmp_path):
    table = task_metrics(fixture_executions(), test_known)
    assert table.columns == ["task_id", *TASK_METRIC_COLUMNS]
    assert table["task_id"].to_list() == ["A", "B", "C"]  # tasks only: the MEAN is no task
    for task_id, expected in EXPECTED.items():
        got = table.filter(pl.col("task_id") == task_id).row(0)[1:]
        assert got == pytest.approx(expected), task_id
    means = task_means(table)
    for index, name in enumerate(TASK_METRIC_COLUMNS):
        assert means[name] == pytest.approx(_mean([e[index] for e in EXPECTED.values()])), name
    assert means["solved"] == 0.5 and means["is_correct"] == 1.0
    write_table(table, tmp_path / "metrics.parquet", METRICS_SCHEMA)  # matches its schema


def test_markdown_formatting():
    text = to_markdown(with_mean_row(task_metrics(fixture_executions(), TEST_KNOWN)))
    lines = text.splitlines()
    assert lines[0] == "| task_id | " + " | ".join(TASK_METRIC_COLUMNS) + " |"
    assert lines[1] == "|" + "---|" * (len(TASK_METRIC_COLUMNS) + 1)
    assert lines[2] == (
        "| A | 5 | 80.0% | 60.0% | 40.0% | 40.0% | 30.0% | 20.0% | 100.0% | 50.0% | 40.0% | "
        "40.0% | 100.0% | 100.0% | 100.0% |"
    )
    assert lines[4].startswith("| C | 2 | 100.0% | 50.0% | 50.0% | 25.0% | 25.0% | 0.0% | 0.0% | - | - |")
    assert lines[5] == (
        "| MEAN | 3 | 93.3% | 70.0% | 63.3% | 46.7% | 35.0% | 23.3% | 66.7% | 55.0% | 45.0% | "
        "45.0% | 100.0% | 100.0% | 50.0% |"
    )


def test_error_table(tmp_path):
    executions = fixture_executions()
    table = error_table(executions)
    assert table.columns == [
        "task_id",
        "n_preds",
        "TimeoutException",
        "NonDeterministicCode",
        "UnsafeCode",
        "ParsingCodeFailed",
        "ZeroDivisionError",
    ]
    rows = {r[0]: r[1:] for r in table.iter_rows()}
    assert rows["A"] == pytest.approx((5, 0.2, 0, 0, 0.2, 0))
    assert rows["B"] == pytest.approx((2, 0, 0, 0, 0, 0))
    assert rows["C"] == pytest.approx((2, 0, 0, 0, 0, 0.5))
    assert rows["MEAN"] == pytest.approx((3, 0.2 / 3, 0, 0, 0.2 / 3, 0.5 / 3))
    write_table(table, tmp_path / "errors.parquet", errors_schema(table.columns[2:]))

    common = common_errors(executions)
    assert common.rows() == [
        ("ParsingCodeFailed", "ParsingCodeFailed happened", 1, pytest.approx(1 / 9), 1),
        ("TimeoutException", "TimeoutException happened", 1, pytest.approx(1 / 9), 1),
        ("ZeroDivisionError", "ZeroDivisionError: division by zero", 1, pytest.approx(1 / 9), 1),
    ]
    text = errors_markdown(table, common)
    assert "| MEAN | 3 | 6.7% | 0.0% | 0.0% | 6.7% | 16.7% |" in text
    assert "| ZeroDivisionError | ZeroDivisionError: division by zero | 1 | 11.1% | 1 |" in text


def test_error_table_without_errors_keeps_the_standard_columns():
    executions = fixture_executions().filter(pl.col("error_type").is_null())
    table = error_table(executions)
    assert table.columns[2:] == ["TimeoutException", "NonDeterministicCode", "UnsafeCode", "ParsingCodeFailed"]
    assert table.filter(pl.col("task_id") == "MEAN").row(0)[2:] == (0.0, 0.0, 0.0, 0.0)
    assert common_errors(executions).height == 0


def test_runs_table_like_the_published_one():
    metrics = task_metrics(fixture_executions(), TEST_KNOWN)
    rows = [
        summary_row(metrics, {"initial": 128, "refinement": 0, "model": "base"}, include_solved=False),
        summary_row(metrics, {"initial": 64, "refinement": 64, "model": "RL-refiner"}, include_solved=False),
    ]
    table = runs_table(rows)
    assert table.columns[:4] == ["initial", "refinement", "model", "valid code"]
    assert table.columns[-1] == "is_correct"
    lines = to_markdown(table).splitlines()
    # the header of docs/defaults.md, byte for byte
    assert lines[0] == (
        "| initial | refinement | model | valid code | valid outputs | unique outputs | "
        "train_pixel_score | train_correct_grids | train_pass_rate | train_is_correct | "
        "test_pixel_score | test_correct_grids | test_pass_rate | test_is_correct | is_correct |"
    )
    assert lines[2].startswith("| 128 | 0 | base | 93.3% | 70.0% | 63.3% |")
    assert lines[3].startswith("| 64 | 64 | RL-refiner | 93.3% |")
    assert "solved" in summary_row(metrics, {"model": "x"}).columns


def test_task_means_refuse_a_table_with_a_mean_row_or_no_task():
    table = task_metrics(fixture_executions(), TEST_KNOWN)
    with pytest.raises(ValueError, match="MEAN row among its tasks"):
        task_means(with_mean_row(table))  # a MEAN row averaged again would be counted as a task
    with pytest.raises(ValueError, match="no task"):
        task_means(table.clear())
