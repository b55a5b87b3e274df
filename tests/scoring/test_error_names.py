"""A program chooses its exception's name: it is data, never a column name (docs/sandbox.md).

Each hostile name below once could (or could have) crashed a stage by becoming a column of an error
pivot: existing column names, an empty string, a very long string, non-ASCII text.
"""

import polars as pl
import pytest
from scoring_helpers import row

from arc_pipeline.evaluation.analysis import errors_wide, runs_errors
from arc_pipeline.evaluation.runs import Run
from arc_pipeline.io import write_table
from arc_pipeline.sandbox import types as sandbox_types
from arc_pipeline.schemas import (
    ALWAYS_ERROR_TYPES,
    COMMON_ERRORS_SCHEMA,
    ERROR_TYPE_COLUMNS,
    KNOWN_ERROR_TYPES,
    OTHER_ERROR_TYPE,
    errors_schema,
)
from arc_pipeline.scoring.tables import common_errors, error_table, errors_markdown

HOSTILE_NAMES = [
    "task_id",
    "n_preds",
    "MEAN",
    "run",
    "model",
    "share",
    "",
    "x" * 10_000,
    "Fehler_ÄÖÜ_ß",
    "错误",
    "a|b\nc",
    "other",
    "error_type",
]


def _executions(names):
    rows = [row(f"p{i}", f"t{i % 3}", error=name) for i, name in enumerate(names)]
    rows += [row("ok1", "t0", fp="f", train=(1.0, 1.0, True)), row("zd", "t1", error="ZeroDivisionError")]
    from arc_pipeline.scoring.execution import executions_frame

    return executions_frame(rows)


def test_vocabulary_is_closed_and_covers_the_sandbox_names():
    assert len(set(ERROR_TYPE_COLUMNS)) == len(ERROR_TYPE_COLUMNS)
    assert not set(ERROR_TYPE_COLUMNS) & {"task_id", "n_preds", "run", "model", "share", "error_type"}
    for name in (
        sandbox_types.TIMEOUT,
        sandbox_types.MEMORY,
        sandbox_types.UNSAFE,
        sandbox_types.NON_DETERMINISTIC,
        sandbox_types.MISSING_TRANSFORM,
        sandbox_types.INVALID_OUTPUT,
        sandbox_types.WORKER_CRASHED,
        sandbox_types.PARSING_CODE_FAILED,
    ):
        assert name in KNOWN_ERROR_TYPES
    with pytest.raises(ValueError, match="ERROR_TYPE_COLUMNS"):
        errors_schema(["task_id"])


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda n: repr(n[:20]))
def test_hostile_error_name_is_counted_as_other(name, tmp_path):
    executions = _executions([name, name, "ValueError"])
    table = error_table(executions)
    assert table.columns[:2] == ["task_id", "n_preds"]
    assert set(table.columns[2:]) <= set(ERROR_TYPE_COLUMNS)
    assert table.columns[2 : 2 + len(ALWAYS_ERROR_TYPES)] == list(ALWAYS_ERROR_TYPES)
    mean = table.filter(pl.col("task_id") == "MEAN").row(0, named=True)
    assert mean["n_preds"] == pytest.approx(5 / 3)
    expected_other = pytest.approx((1 / 2 + 1 / 2 + 0) / 3)  # t0: p0 + ok1, t1: p1 + zd, t2: ValueError
    assert mean[OTHER_ERROR_TYPE] == expected_other
    write_table(table, tmp_path / "errors.parquet", errors_schema(table.columns[2:]))

    common = common_errors(executions)
    assert name in common["error_type"].to_list()  # the raw name survives as a cell value
    write_table(common, tmp_path / "common.parquet", COMMON_ERRORS_SCHEMA)
    text = errors_markdown(table, common)
    header = text.splitlines()[2].strip("| ").split(" | ")
    assert header[:2] == ["task_id", "n_preds"] and set(header[2:]) <= set(ERROR_TYPE_COLUMNS)


def test_runs_errors_and_wide_table_with_hostile_names():
    runs = [
        Run("r1", "base", 8, 0, _executions(HOSTILE_NAMES)),
        Run("r2", "RL", 8, 0, _executions(["IndexError", "task_id"])),
    ]
    errors = runs_errors(runs)
    assert set(errors["error_type"].to_list()) <= set(ERROR_TYPE_COLUMNS)
    wide = errors_wide(errors)
    assert wide.columns[:2] == ["model", "run"]
    assert set(wide.columns[2:]) <= set(ERROR_TYPE_COLUMNS)
    assert wide.height == 2
    # a long-format frame that holds raw names (e.g. read from elsewhere) still pivots only the vocabulary
    raw = pl.DataFrame(
        {
            "run": ["r1", "r1", "r1"],
            "model": ["m", "m", "m"],
            "error_type": ["run", "model", "IndexError"],
            "share": [0.1, 0.2, 0.3],
        }
    )
    wide = errors_wide(raw)
    assert wide.columns == ["model", "run", OTHER_ERROR_TYPE, "IndexError"]
    assert wide.row(0) == ("m", "r1", pytest.approx(0.3), pytest.approx(0.3))
