"""execute_predictions and the ``arc-pipeline execute`` stage, end to end on the real sandbox.

A non-square, non-symmetric task (recolour 1 -> 2) and six predictions: correct, wrong, unparsable,
raising, and two with an augmentation (hflip + rot90 + colour swap): one written for the augmented
task (correct once its outputs are un-augmented) and one written for the original colours (wrong,
since it sees augmented inputs).
"""

from __future__ import annotations

import importlib
import json
import re

import numpy as np
import polars as pl
import pytest

from arc_pipeline.cli import main as cli_main
from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, METRICS_SCHEMA, PREDICTIONS_SCHEMA, TASKS_SCHEMA
from tests.prediction_rows import prediction_row, predictions_table

try:
    importlib.import_module("arc_pipeline.sandbox")
    SANDBOX_MISSING = None
except ImportError as error:  # the sandbox is written concurrently by another contributor
    SANDBOX_MISSING = f"arc_pipeline.sandbox does not import yet: {error}"
needs_sandbox = pytest.mark.skipif(SANDBOX_MISSING is not None, reason=SANDBOX_MISSING or "")

IDENTITY = {"hflip": False, "rot90_k": 0, "color_map": list(range(10))}
AUGMENTED = {"hflip": True, "rot90_k": 1, "color_map": [0, 3, 4, 1, 2, 5, 6, 7, 8, 9]}  # 1<->3, 2<->4


def g(rows):
    return np.array(rows, dtype=np.int8)


TASK = Task(
    "task1",
    train=(
        Pair(g([[1, 0, 0], [0, 0, 0]]), g([[2, 0, 0], [0, 0, 0]])),
        Pair(g([[0, 1, 1], [0, 0, 1]]), g([[0, 2, 2], [0, 0, 2]])),
    ),
    test=(Pair(g([[1, 0, 0], [1, 1, 0]]), g([[2, 0, 0], [2, 2, 0]])),),
    source="test",
)


def program(body: str) -> str:
    return (
        "The rule is simple.\n```python\nfrom common import *\nimport numpy as np\n\n"
        f"def transform(input_grid):\n{body}\n```\nDone."
    )


RECOLOR_1_TO_2 = program(
    "    output_grid = input_grid.copy()\n    output_grid[input_grid == 1] = 2\n"
    "    print('debug')\n    return output_grid"
)
RECOLOR_3_TO_4 = program(
    "    output_grid = input_grid.copy()\n    output_grid[input_grid == 3] = 4\n    return output_grid"
)
IDENTITY_PROGRAM = program("    return input_grid")
RAISING = program("    return 1 / 0")

PREDICTIONS = [  # (suffix, augmentation, text)
    ("correct", IDENTITY, RECOLOR_1_TO_2),
    ("wrong", IDENTITY, IDENTITY_PROGRAM),
    ("unparsable", IDENTITY, "I think the answer is to recolour, but here is no code."),
    ("raises", IDENTITY, RAISING),
    ("augmented", AUGMENTED, RECOLOR_3_TO_4),
    ("augmented_naive", AUGMENTED, RECOLOR_1_TO_2),
]


def prediction(index: int, suffix: str, augmentation: dict, text: str, task_id: str = "task1") -> dict:
    pid = f"{task_id}/t1/r0/s{index}_{suffix}"
    return prediction_row(task_id, text, prediction_id=pid, sample_index=index, **augmentation)


def predictions_frame() -> pl.DataFrame:
    rows = [prediction(i, *spec) for i, spec in enumerate(PREDICTIONS)]
    return read_frame_from_rows(rows)


def read_frame_from_rows(rows):
    return pl.from_arrow(predictions_table(rows))


def check_executions(executions: pl.DataFrame) -> None:
    by_suffix = {row["prediction_id"].split("_", 1)[1]: row for row in executions.iter_rows(named=True)}
    assert executions["prediction_id"].to_list() == [f"task1/t1/r0/s{i}_{s}" for i, (s, _, _) in enumerate(PREDICTIONS)]
    truth_train = [grid.tolist() for grid in TASK.train_outputs]
    truth_test = [grid.tolist() for grid in TASK.test_outputs]

    for name in ("correct", "augmented"):  # the augmented one proves un-augmentation
        row = by_suffix[name]
        assert row["error_type"] is None, row["error_message"]
        assert row["train_outputs"] == truth_train and row["test_outputs"] == truth_test
        assert row["train_pixel_score"] == 1.0 and row["train_correct_grids"] == 1.0 and row["train_is_correct"]
        assert row["test_pixel_score"] == 1.0 and row["test_is_correct"]
    assert by_suffix["correct"]["fingerprint"] == by_suffix["augmented"]["fingerprint"]

    for name in ("wrong", "augmented_naive"):  # both return their (un-augmented) inputs
        row = by_suffix[name]
        assert row["error_type"] is None and row["has_code"]
        assert row["train_outputs"] == [grid.tolist() for grid in TASK.train_inputs]
        assert row["train_pixel_score"] == pytest.approx((5 / 6 + 3 / 6) / 2)
        assert row["train_correct_grids"] == 0.0 and row["train_is_correct"] is False
        assert row["test_pixel_score"] == pytest.approx(3 / 6) and row["test_is_correct"] is False
    assert by_suffix["wrong"]["fingerprint"] == by_suffix["augmented_naive"]["fingerprint"]

    row = by_suffix["unparsable"]
    assert row["error_type"] == "ParsingCodeFailed" and row["has_code"] is False
    assert row["train_outputs"] is None and row["fingerprint"] is None and row["train_pixel_score"] is None

    row = by_suffix["raises"]
    assert row["error_type"] == "ZeroDivisionError" and row["has_code"] is True
    assert row["train_pixel_score"] is None and row["test_is_correct"] is None


@needs_sandbox
def test_execute_predictions_end_to_end():
    from arc_pipeline.sandbox import Sandbox, SandboxConfig
    from arc_pipeline.scoring.execution import execute_predictions

    with Sandbox(SandboxConfig(workers=2, timeout_s=5.0, memory_mb=2048)) as sandbox:
        executions = execute_predictions(predictions_frame(), {"task1": TASK}, sandbox, progress=False)
    assert executions.schema == pl.from_arrow(EXECUTIONS_SCHEMA.empty_table()).schema
    check_executions(executions)


def write_inputs(tmp_path, predictions: pl.DataFrame | None = None, tasks=(TASK,)):
    write_table(
        predictions if predictions is not None else predictions_frame(),
        tmp_path / "predictions.parquet",
        PREDICTIONS_SCHEMA,
    )
    write_table([task.to_row() for task in tasks], tmp_path / "tasks.parquet", TASKS_SCHEMA)


def stage_args(tmp_path, **config) -> list[str]:
    config = {"workers": 2, "timeout_s": 5.0, "chunk_size": 2, "progress": False, **config}
    out = tmp_path / "out"
    return [
        "execute",
        "--predictions",
        str(tmp_path / "predictions.parquet"),
        "--tasks",
        str(tmp_path / "tasks.parquet"),
        "--executions",
        str(out / "executions.parquet"),
        "--metrics",
        str(out / "metrics.parquet"),
        "--metrics-md",
        str(out / "metrics.md"),
        "--metrics-html",
        str(out / "metrics.html"),
        "--title",
        "Part 7 metrics",
        "--errors",
        str(out / "errors.parquet"),
        "--errors-md",
        str(out / "errors.md"),
        "--config-json",
        json.dumps(config),
    ]


def stage_error(tmp_path, capsys, **config) -> str:
    """What the stage printed to stderr when it failed with exit status 1 (a PipelineError's one line)."""
    capsys.readouterr()
    assert cli_main(stage_args(tmp_path, **config)) == 1
    return capsys.readouterr().err


@needs_sandbox
@pytest.mark.parametrize("scoring_workers", [0, 2])  # in the main process, or in a pool beside the sandbox
def test_execute_stage(tmp_path, capsys, scoring_workers):
    write_inputs(tmp_path)
    assert cli_main(stage_args(tmp_path, scoring_workers=scoring_workers)) == 0
    log_text = capsys.readouterr().err  # the CLI logs to stderr (basicConfig(force=True) bypasses caplog)
    out = tmp_path / "out"
    check_executions(read_frame(out / "executions.parquet", EXECUTIONS_SCHEMA))
    assert not (out / "executions.parquet.partial").exists()

    metrics = read_frame(out / "metrics.parquet", METRICS_SCHEMA)
    task = metrics.filter(pl.col("task_id") == "task1").row(0, named=True)
    assert task["n_preds"] == 6
    assert task["valid code"] == pytest.approx(5 / 6)
    assert task["valid outputs"] == pytest.approx(4 / 6)
    assert task["unique outputs"] == pytest.approx(2 / 6)
    assert task["train_pass_rate"] == pytest.approx(2 / 6)
    assert task["train_pixel_score"] == pytest.approx((1 + 1 + 2 * (2 / 3)) / 6)
    assert task["is_correct"] == 1.0 and task["solved"] == 1.0
    assert metrics["task_id"].to_list() == ["task1"]  # the parquet holds tasks only
    md = (out / "metrics.md").read_text()
    assert "| task1 | 6 | 83.3% | 66.7% | 33.3% |" in md
    assert "| MEAN | 6 | 83.3% | 66.7% | 33.3% |" in md  # the mean is shown in the markdown table
    page = (out / "metrics.html").read_text()  # the report's inline view of the same table
    assert "<title>Part 7 metrics</title>" in page and "1 tasks, 6 predictions" in page
    assert '<td>task1</td><td class="num">6</td><td class="num">83.3%</td>' in page
    assert '<td>MEAN</td><td class="num">6</td>' in page and "valid code = a code block was present" in page

    errors = read_frame(out / "errors.parquet")
    assert errors.columns == [
        "task_id",
        "n_preds",
        "TimeoutException",
        "NonDeterministicCode",
        "UnsafeCode",
        "ParsingCodeFailed",
        "ZeroDivisionError",
    ]
    assert errors.row(0)[2:] == pytest.approx((0, 0, 0, 1 / 6, 1 / 6))
    errors_md = (out / "errors.md").read_text()
    assert "Most common errors" in errors_md and "ZeroDivisionError" in errors_md
    assert "executed 6 predictions of 1 tasks" in log_text and "solved 100.0%" in log_text


def test_execute_stage_with_no_predictions_writes_empty_tables(tmp_path):
    """A refinement run whose tasks had no prompt samples nothing: execute must not stop the workflow."""
    write_inputs(tmp_path, read_frame_from_rows([]))
    assert cli_main(stage_args(tmp_path)) == 0
    out = tmp_path / "out"
    assert read_frame(out / "executions.parquet", EXECUTIONS_SCHEMA).height == 0
    metrics = read_frame(out / "metrics.parquet", METRICS_SCHEMA)
    assert metrics.height == 0  # no task, so no MEAN row either
    assert read_frame(out / "errors.parquet").height == 0
    assert (out / "metrics.md").read_text().startswith("| task_id | n_preds |")


class Killed(BaseException):
    """Stands for the job being killed (not KeyboardInterrupt, which pytest treats as a stop)."""


@needs_sandbox
def test_execute_resumes_after_a_kill(tmp_path, monkeypatch, capsys):
    """Chunks written before a crash are reused; a changed chunk or limit is executed again."""
    from arc_pipeline.scoring import resumable

    write_inputs(tmp_path)
    real_write = resumable.write_table
    written: list[str] = []
    resumed = False

    def write_then_die(data, path, schema):  # simulates a kill after the second chunk is safely written
        real_write(data, path, schema)
        written.append(path.name)
        if len(written) == 2 and not resumed:
            raise Killed

    monkeypatch.setattr(resumable, "write_table", write_then_die)
    with pytest.raises(Killed):
        cli_main(stage_args(tmp_path))
    partial = tmp_path / "out" / "executions.parquet.partial"
    kept = sorted(path.name for path in partial.glob("chunk-*.parquet"))
    assert kept == sorted(written) and len(kept) == 2
    assert not (tmp_path / "out" / "executions.parquet").exists()

    # rerun with the second prediction changed: chunk 0 is executed again, chunk 1 is reused
    predictions = predictions_frame().with_columns(
        pl.when(pl.col("sample_index") == 1).then(pl.lit(RECOLOR_1_TO_2)).otherwise(pl.col("text")).alias("text")
    )
    write_inputs(tmp_path, predictions)
    written.clear()
    resumed = True
    capsys.readouterr()
    assert cli_main(stage_args(tmp_path)) == 0
    assert [name[:12] for name in written] == ["chunk-000000", "chunk-000002"]
    assert "resuming: 1 of 3 chunks" in capsys.readouterr().err
    executions = read_frame(tmp_path / "out" / "executions.parquet", EXECUTIONS_SCHEMA)
    assert executions.height == 6 and not partial.exists()
    assert executions["train_is_correct"].to_list() == [True, True, None, None, True, False]


def test_stage_rejects_unknown_task(tmp_path, capsys):
    predictions = read_frame_from_rows([prediction(0, "x", IDENTITY, RAISING, task_id="nowhere")])
    write_inputs(tmp_path, predictions)
    expected = r"predictions.parquet: predictions for 1 task\(s\) not in the tasks file: nowhere"
    assert re.search(expected, stage_error(tmp_path, capsys))


def test_stage_rejects_missing_columns(tmp_path, capsys):
    write_inputs(tmp_path)
    pl.DataFrame({"prediction_id": ["a"], "task_id": ["task1"]}).write_parquet(tmp_path / "predictions.parquet")
    assert re.search(r"predictions.parquet: missing columns \['turn', 'text'", stage_error(tmp_path, capsys))


def test_stage_rejects_bad_task_grid(tmp_path, capsys):
    write_inputs(tmp_path)
    row = TASK.to_row()
    row["train_outputs"] = [[[1, 2], [3]], row["train_outputs"][1]]
    write_table([row], tmp_path / "tasks.parquet", TASKS_SCHEMA)
    assert "tasks.parquet: task task1" in stage_error(tmp_path, capsys)


def test_stage_config_is_validated(tmp_path, capsys):
    write_inputs(tmp_path)
    assert "timeout_s" in stage_error(tmp_path, capsys, timeout_s=-1)


def test_chunk_digest_changes_with_what_decides_results():
    from arc_pipeline.scoring.resumable import chunk_digest

    predictions = predictions_frame()
    other_task = Task("task1", TASK.train, (Pair(TASK.test[0].input, g([[0]])),), "test")

    def digest(frame=predictions, task=TASK, limits="(1.0, 2048)"):
        return chunk_digest(frame, {"task1": task}, limits, {})

    base = digest()
    assert digest() == base  # stable
    assert digest(limits="(2.0, 2048)") != base  # another time limit
    assert digest(task=other_task) != base  # another test solution
    assert digest(frame=predictions.with_columns(pl.lit(True).alias("hflip"))) != base  # another augmentation
    assert digest(frame=predictions.with_columns(pl.lit(5).cast(pl.Int16).alias("round"))) == base  # irrelevant


def test_metric_tables_carry_the_legend() -> None:
    from arc_pipeline.scoring.legend import with_legend

    table = "| task_id | valid code |\n|---|---|\n| a | 100.0% |\n"
    text = with_legend(table)
    assert text.startswith(table + "\n") and "valid code = a code block was present" in text
