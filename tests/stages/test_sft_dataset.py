"""Stage sft_dataset on hand-made tables: which sampled refinements become SFT rows, and the counts.

Real parquet files through the stage's command line; the tables hold only the columns the stage reads
(its reads select those), so each row says only what matters here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from arc_pipeline.cli import main as cli_main
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA, SFT_DATASET_SCHEMA
from arc_pipeline.stages.sft_dataset import EXECUTION_COLUMNS, REFINEMENT_COLUMNS
from tests.prediction_rows import prediction_row


def program(body: str, prose: str = "I fix it.") -> str:
    return f"{prose}\n```python\ndef transform(input_grid):\n    {body}\n```"


# (task, sample, text, train right, test right, finish reason)
SAMPLES = [
    ("t1", 0, program("return input_grid + 1"), True, True, "stop"),  # kept
    ("t1", 1, program("return input_grid + 1", "Other words."), True, True, "stop"),  # same program: dropped
    ("t1", 2, program("return input_grid * 2"), True, True, "stop"),  # kept
    ("t1", 3, program("return input_grid - 1"), True, True, "stop"),  # over max_per_task 2: dropped
    ("t1", 4, program("return input_grid"), True, False, "stop"),  # test wrong: not a solve
    ("t1", 5, program("return input_grid.T"), True, True, "length"),  # truncated: dropped
    ("t2", 0, program("return input_grid"), True, None, "stop"),  # test unknown: not a solve
    ("t2", 1, "no code at all", None, None, "stop"),  # no outputs
    ("t3", 0, program("return input_grid[::-1]"), True, True, "stop"),  # kept
]


def parent(task_id: str) -> str:
    return f"{task_id}/t1/r0/s0"


def write_inputs(folder: Path, samples=SAMPLES) -> dict[str, Path]:
    paths = {name: folder / f"{name}.parquet" for name in ("refinements", "predictions", "executions")}
    refinements = [
        {
            "task_id": task,
            "prediction_id": parent(task),
            "prompt": f"<|begin_of_text|>prompt of {task}",
            "prompt_tokens": 7,
        }
        for task in ("t1", "t2", "t3")
    ]
    write_table(refinements, paths["refinements"], pa.schema([REFINEMENT_SCHEMA.field(n) for n in REFINEMENT_COLUMNS]))
    predictions, executions = [], []
    for task, sample, text, train_ok, test_ok, finish in samples:
        row = prediction_row(
            task, text, turn=2, sample_index=sample, parent_prediction_id=parent(task), finish_reason=finish
        )
        predictions.append(row)
        executions.append(
            {"prediction_id": row["prediction_id"], "train_is_correct": train_ok, "test_is_correct": test_ok}
        )
    write_table(predictions, paths["predictions"], PREDICTIONS_SCHEMA)
    write_table(executions, paths["executions"], pa.schema([EXECUTIONS_SCHEMA.field(n) for n in EXECUTION_COLUMNS]))
    return paths


def run_stage(
    paths: dict[str, Path], folder: Path, max_per_task: int = 2, keep: str = "solved"
) -> tuple[int, Path, Path]:
    """The stage's exit status, its output and its summary."""
    output, summary = folder / "sft.parquet", folder / "summary.json"
    status = cli_main(
        [
            "sft-dataset",
            "--refinements",
            str(paths["refinements"]),
            "--predictions",
            str(paths["predictions"]),
            "--executions",
            str(paths["executions"]),
            "--output",
            str(output),
            "--summary",
            str(summary),
            "--config-json",
            json.dumps({"max_per_task": max_per_task, "keep": keep}),
        ]
    )
    return status, output, summary


def test_solves_are_kept_once_per_program_up_to_the_cap_and_counted(tmp_path):
    status, output, summary = run_stage(write_inputs(tmp_path), tmp_path)
    assert status == 0
    rows = read_frame(output, SFT_DATASET_SCHEMA)
    assert rows["prediction_id"].to_list() == ["t1/t2/r0/s0", "t1/t2/r0/s2", "t3/t2/r0/s0"]
    first = rows.row(0, named=True)
    assert first["prompt"] == "<|begin_of_text|>prompt of t1"  # as rendered: the sft stage applies the BOS rule
    assert first["completion"] == SAMPLES[0][2]
    assert first["source_prediction_id"] == parent("t1")
    assert (first["prompt_tokens"], first["completion_tokens"]) == (7, 5)
    counts = json.loads(summary.read_text())
    assert {key: value for key, value in counts.items() if key != "config"} == {
        "prompts": 3,
        "prompts_sampled": 3,
        "completions": 9,
        "solved": 6,
        "truncated_solved": 1,
        "duplicates": 1,
        "over_cap": 1,
        "kept": 3,
        "prompts_with_success": 2,
    }
    assert counts["config"]["max_per_task"] == 2


def test_the_mutation_keeps_the_failures_by_the_same_rules(tmp_path):
    """keep: failed (the canary's mutation run) takes every completion that did not solve its task, once per
    program and within the cap, never a solve."""
    status, output, summary = run_stage(write_inputs(tmp_path), tmp_path, keep="failed")
    assert status == 0
    rows = read_frame(output, SFT_DATASET_SCHEMA)
    assert rows["prediction_id"].to_list() == ["t1/t2/r0/s4", "t2/t2/r0/s0", "t2/t2/r0/s1"]
    counts = json.loads(summary.read_text())
    assert (counts["solved"], counts["kept"], counts["prompts_with_success"]) == (6, 3, 2)
    assert counts["config"]["keep"] == "failed"


def test_a_file_without_a_needed_column_is_named(tmp_path, capsys):
    paths = write_inputs(tmp_path)
    read_frame(paths["executions"]).drop("test_is_correct").write_parquet(paths["executions"])
    status, output, _ = run_stage(paths, tmp_path)
    assert status != 0 and not output.exists()
    assert f"{paths['executions']}: missing columns ['test_is_correct']" in capsys.readouterr().err


def test_completions_of_another_refinement_file_are_refused_naming_the_file(tmp_path, capsys):
    paths = write_inputs(tmp_path, SAMPLES + [("t9", 0, program("return 0"), True, True, "stop")])
    status, output, _ = run_stage(paths, tmp_path)
    assert status != 0 and not output.exists()
    assert f"{paths['predictions']}: predictions: 1 row(s) whose parent_prediction_id" in capsys.readouterr().err
