"""Selection of wrong predictions and the refinement dataset (docs/prompts.md and docs/scoring.md).

The expected prompt is written out by hand (augmented grids, feedback texts and Jinja whitespace
worked out on paper), then rendered with the tiny model's chat template: the stage must match it
byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from arc_pipeline.cli import main as cli_main
from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.refinement import select_for_evaluation, select_for_training, wrong_predictions
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA, TASKS_SCHEMA
from tests.generation.inference_helpers import build_untrained_tiny_model, write_tasks
from tests.prediction_rows import prediction_row

# hflip, then rot90 once, then 1 -> 3 (Green) and 2 -> 4 (Yellow)
AUGMENTATION = {"hflip": True, "rot90_k": 1, "color_map": [0, 3, 4, 1, 2, 5, 6, 7, 8, 9]}
IDENTITY = {"hflip": False, "rot90_k": 0, "color_map": list(range(10))}
PREVIOUS_TEXT = "The rule recolors blue to red.\n```python\ndef transform(input_grid):\n    return input_grid\n```"


def grid(rows):
    return np.array(rows, dtype=np.int8)


def make_tasks() -> list[Task]:
    t1 = Task(
        "t1",
        train=(
            Pair(grid([[1, 0], [0, 0]]), grid([[2, 0], [0, 0]])),
            Pair(grid([[0, 1], [0, 0]]), grid([[0, 2], [0, 0]])),
        ),
        test=(Pair(grid([[5, 1], [0, 0]]), grid([[5, 2], [0, 0]])),),
        source="test",
    )
    t2 = Task("t2", train=t1.train, test=t1.test, source="test")
    t3 = Task("t3", train=t1.train, test=t1.test, source="test")
    return [t1, t2, t3]


def prediction(pid: str, task_id: str, augmentation: dict, text: str = PREVIOUS_TEXT, test_index: int = 0) -> dict:
    fields = {"train_order": [1, 0], "test_index": test_index, **augmentation}
    return prediction_row(task_id, text, prediction_id=pid, **fields)


def execution(
    pid: str,
    task_id: str,
    train_outputs,
    correct: float | None,
    pixel: float | None,
    error: str | None = None,
    fingerprint: str | None = None,
) -> dict:
    return {
        "prediction_id": pid,
        "task_id": task_id,
        "turn": 1,
        "has_code": True,
        "error_type": error,
        "error_message": None if error is None else "boom",
        "train_outputs": None if error else train_outputs,
        "test_outputs": None if error else [[[5, 2], [0, 0]]],
        "fingerprint": fingerprint or (None if error else pid),
        "train_pixel_score": pixel,
        "train_correct_grids": correct,
        "train_is_correct": None if error else correct == 1,
        "test_pixel_score": None,
        "test_correct_grids": None,
        "test_is_correct": None,
        "duration_s": 0.1,
    }


# Un-augmented outputs of the chosen prediction: train 1 right, train 2 a 1x3 row.
CHOSEN_OUTPUTS = [[[2, 0], [0, 0]], [[0, 2, 0]]]
OTHER_OUTPUTS = [[[1, 1], [1, 1]], [[1, 1], [1, 1]]]


def make_rows():
    predictions = [
        prediction("t1/a", "t1", IDENTITY, text="other"),
        prediction("t1/b", "t1", AUGMENTATION),  # the one to refine
        prediction("t1/c", "t1", IDENTITY, text="solves train"),
        prediction("t1/d", "t1", IDENTITY, text="crashes"),
        prediction("t2/a", "t2", IDENTITY),
        prediction("t3/b", "t3", IDENTITY, text="tie, later id"),
        prediction("t3/a", "t3", IDENTITY, text="tie, earlier id"),
    ]
    executions = [
        execution("t1/a", "t1", OTHER_OUTPUTS, 0.5, 0.6),
        execution("t1/b", "t1", CHOSEN_OUTPUTS, 0.5, 0.66),
        execution("t1/c", "t1", OTHER_OUTPUTS, 1.0, 1.0),
        execution("t1/d", "t1", None, None, None, error="TimeoutException"),
        execution("t2/a", "t2", OTHER_OUTPUTS, 1.0, 1.0),
        execution("t3/b", "t3", OTHER_OUTPUTS, 0.0, 0.5, fingerprint="same"),
        execution("t3/a", "t3", OTHER_OUTPUTS, 0.0, 0.5, fingerprint="same"),
    ]
    return predictions, executions


FIRST_USER = (
    "Given input-output grid pairs as reference examples, carefully observe the patterns to predict the output "
    "grid for new test input. Each pair follows the same transformation rule. Grids are 2D arrays represented as "
    "strings, with cells (colors) separated by spaces and rows by newlines.\n"
    "Here are the input and output grids for the reference examples:\n"
    "Example 1\nInput:\nGreen Black\nBlack Black\n\nOutput:\nYellow Black\nBlack Black\n\n"
    "Example 2\nInput:\nBlack Black\nGreen Black\n\nOutput:\nBlack Black\nYellow Black\n\n"
    "\nHere is the input grid for the test example:\nGray Black\nGreen Black\n\n"
    "Write a Python function `transform` that can convert any given input grid to its corresponding output grid "
    "based on the pattern observed in the reference examples."
)
ASSISTANT = (
    "Let's solve this puzzle using Python code with the common library functions. We'll first reason about the "
    "problem and then write the code to solve it. The `transform` function will take the input grid and return the "
    "output grid. Here is the Python code with the comments describing how to solve the problem:\n" + PREVIOUS_TEXT
)
SECOND_USER = (
    "Your first solution was not correct. These are the results from executing your code:\n"
    "Example 1\nExecution output:\n\n\nThe output grid matches the expected output grid.\n\n"
    "Example 2\nExecution output:\nBlack\nYellow\nBlack\n\n"
    "The output grid does not match the expected output grid.\nThe pixel similarity score is 33.3%.\n"
    "The expected output grid has shape (2, 2), but the generated output grid has shape (3, 1).\n\n"
    "\nWrite a revised Python function `transform` that addresses the issues in your previous attempt and correctly "
    "transforms the input grid to the output grid based on the patterns observed in the reference examples."
)
SYSTEM = (
    "You are a world-class puzzle solver with exceptional pattern recognition skills and expertise in Python "
    "programming. Your task is to analyze puzzles and provide Python solutions."
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    # only its tokenizer is read: the untrained build (the warm-up takes most of a build, and the tokenizer does not
    # depend on it)
    folder = tmp_path_factory.mktemp("model")
    return build_untrained_tiny_model(
        write_tasks(make_tasks(), folder / "tasks.parquet"), folder / "tiny", vocab_size=600
    )


def test_selection_picks_best_wrong_prediction_per_task():
    _, executions = make_rows()
    frame = pl.DataFrame(executions, schema=pl.from_arrow(EXECUTIONS_SCHEMA.empty_table()).schema)
    wrong = wrong_predictions(frame)
    assert wrong["prediction_id"].to_list() == ["t1/b", "t1/a", "t3/a", "t3/b"]
    assert select_for_training(frame)["prediction_id"].to_list() == ["t1/b", "t3/a"]


def test_evaluation_selection_cycles_distinct_fingerprints():
    _, executions = make_rows()
    frame = pl.DataFrame(executions, schema=pl.from_arrow(EXECUTIONS_SCHEMA.empty_table()).schema)
    chosen = select_for_evaluation(frame, k=5)
    t1 = chosen.filter(pl.col("task_id") == "t1")
    assert t1["prediction_id"].to_list() == ["t1/b", "t1/a", "t1/b", "t1/a", "t1/b"]
    assert t1["refinement_index"].to_list() == [0, 1, 2, 3, 4]
    # t3's two predictions share a fingerprint: only the better-ranked one is cycled
    assert chosen.filter(pl.col("task_id") == "t3")["prediction_id"].to_list() == ["t3/a"] * 5
    assert "t2" not in chosen["task_id"].to_list()


def test_refine_dataset_stage_matches_hand_built_prompt(tiny_model, tmp_path):
    from arc_pipeline.models.folder import load_tokenizer

    predictions, executions = make_rows()
    tasks_path, predictions_path, executions_path = (tmp_path / f"{n}.parquet" for n in ("tasks", "preds", "execs"))
    write_table([task.to_row() for task in make_tasks()], tasks_path, TASKS_SCHEMA)
    write_table(predictions, predictions_path, PREDICTIONS_SCHEMA)
    write_table(executions, executions_path, EXECUTIONS_SCHEMA)
    output = tmp_path / "refine.parquet"
    cli_main(
        [
            "refine-dataset",
            "--tasks",
            str(tasks_path),
            "--predictions",
            str(predictions_path),
            "--executions",
            str(executions_path),
            "--model",
            str(tiny_model),
            "--output",
            str(output),
        ]
    )
    frame = read_frame(output, REFINEMENT_SCHEMA)
    assert frame["prediction_id"].to_list() == ["t1/b", "t3/a"]
    row = frame.row(0, named=True)

    tokenizer = load_tokenizer(tiny_model)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FIRST_USER},
        {"role": "assistant", "content": ASSISTANT},
        {"role": "user", "content": SECOND_USER},
    ]
    expected = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert row["prompt"] == expected
    assert row["prompt"].endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert row["prompt_tokens"] == len(tokenizer(expected, add_special_tokens=False)["input_ids"])
    # the task and the previous outputs in the prediction's augmented frame
    assert row["train_inputs"] == [[[3, 0], [0, 0]], [[0, 0], [3, 0]]]
    assert row["train_outputs"] == [[[4, 0], [0, 0]], [[0, 0], [4, 0]]]
    assert row["test_inputs"] == [[[5, 0], [3, 0]]]
    assert row["test_outputs"] == [[[5, 0], [4, 0]]]
    assert row["previous_train_outputs"] == [[[4, 0], [0, 0]], [[0], [4], [0]]]
    assert (row["hflip"], row["rot90_k"], row["color_map"]) == (True, 1, AUGMENTATION["color_map"])
    assert row["previous_text"] == PREVIOUS_TEXT
    assert row["previous_train_correct_grids"] == 0.5


def test_refine_dataset_drops_long_prompts(tiny_model, tmp_path):
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.stages.refine_dataset import RefineDatasetConfig, build_dataset

    predictions, executions = make_rows()
    schema = pl.from_arrow(EXECUTIONS_SCHEMA.empty_table()).schema
    tasks = {task.task_id: task for task in make_tasks()}
    tokenizer = load_tokenizer(tiny_model)
    predictions_frame = pl.from_arrow(pa.Table.from_pylist(predictions, schema=PREDICTIONS_SCHEMA))
    rows, counts = build_dataset(
        tasks,
        predictions_frame,
        pl.DataFrame(executions, schema=schema),
        tokenizer,
        RefineDatasetConfig(),
        max_prompt_tokens=None,
    )
    lengths = sorted(row["prompt_tokens"] for row in rows)
    limit = lengths[0]  # the shorter prompt fits exactly, the longer one does not
    assert lengths[1] > limit
    rows, counts = build_dataset(
        tasks,
        predictions_frame,
        pl.DataFrame(executions, schema=schema),
        tokenizer,
        RefineDatasetConfig(),
        max_prompt_tokens=limit,
    )
    assert counts["dropped_too_long"] == 1 and counts["kept"] == 1
    assert len(rows) == 1 and rows[0]["prompt_tokens"] == limit
