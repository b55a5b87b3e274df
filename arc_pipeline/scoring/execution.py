"""Bridge from predictions to scored executions: extract, augment, run in the sandbox, undo, score.

Every prediction's program runs on its task's train inputs then test inputs, augmented with the
prediction's own parameters (the model saw the augmented task); its outputs are un-augmented
before they are fingerprinted and scored against the original task (docs/scoring.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from arc_pipeline.domain.augmentation import Augmentation
from arc_pipeline.domain.grids import Grid, GridError, as_grid, grids_to_lists
from arc_pipeline.domain.tasks import Task
from arc_pipeline.sandbox import ProgramResult, Sandbox
from arc_pipeline.sandbox.program import extract_code
from arc_pipeline.sandbox.types import INVALID_OUTPUT, MAX_OUTPUT_SIDE_LIMIT, PARSING_CODE_FAILED
from arc_pipeline.schemas import EXECUTIONS_SCHEMA
from arc_pipeline.scoring.fingerprint import fingerprint
from arc_pipeline.scoring.rules import apply_rules
from arc_pipeline.scoring.scores import empty_row, partition_scores

# columns of a predictions frame this module reads
NEEDED_COLUMNS = ("prediction_id", "task_id", "turn", "text", "hflip", "rot90_k", "color_map")


def check_predictions(predictions: pl.DataFrame, tasks: Mapping[str, Task], source: str = "predictions") -> None:
    """Fail before any work with the missing columns or the unknown task ids, naming ``source``."""
    missing = [name for name in NEEDED_COLUMNS if name not in predictions.columns]
    if missing:
        raise ValueError(f"{source}: missing columns {missing}")
    unknown = sorted(set(predictions["task_id"].unique().to_list()) - set(tasks))
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise ValueError(f"{source}: predictions for {len(unknown)} task(s) not in the tasks file: {shown}")


def _augmented_inputs(task: Task, augmentation: Augmentation) -> list[Grid]:
    return [augmentation.apply(grid) for grid in (*task.train_inputs, *task.test_inputs)]


def _failed_row(
    base: dict[str, Any], has_code: bool, error_type: str, message: str | None, duration_s: float
) -> dict[str, Any]:
    return {
        **base,
        "has_code": has_code,
        "error_type": error_type,
        "error_message": message,
        "train_outputs": None,
        "test_outputs": None,
        "fingerprint": None,
        **empty_row("train"),
        **empty_row("test"),
        "duration_s": duration_s,
    }


def _undo_outputs(outputs: Sequence[Any], augmentation: Augmentation) -> list[Grid]:
    """Validate (the sandbox should have) and un-augment every output grid; GridError if one is bad.

    The side limit is the sandbox's largest: the sandbox already applied the run's rules (30 or 35)."""
    return [augmentation.undo(as_grid(output, max_side=MAX_OUTPUT_SIDE_LIMIT)) for output in outputs]


def execution_row(
    base: dict[str, Any], task: Task, augmentation: Augmentation, result: ProgramResult
) -> dict[str, Any]:
    """One EXECUTIONS_SCHEMA row from a sandbox result (outputs still augmented)."""
    if result.error_type is not None or result.outputs is None:
        return _failed_row(base, True, result.error_type or INVALID_OUTPUT, result.error_message, result.duration_s)
    n_train, n_test = len(task.train), len(task.test)
    if len(result.outputs) != n_train + n_test:
        return _failed_row(
            base,
            True,
            INVALID_OUTPUT,
            f"{len(result.outputs)} outputs for {n_train + n_test} inputs",
            result.duration_s,
        )
    try:
        outputs = _undo_outputs(result.outputs, augmentation)
    except GridError as error:
        return _failed_row(base, True, INVALID_OUTPUT, str(error), result.duration_s)
    train_outputs, test_outputs = outputs[:n_train], outputs[n_train:]
    train = partition_scores(train_outputs, task.train_outputs)
    test = partition_scores(test_outputs, task.test_outputs)
    return {
        **base,
        "has_code": True,
        "error_type": None,
        "error_message": None,
        "train_outputs": grids_to_lists(train_outputs),
        "test_outputs": grids_to_lists(test_outputs),
        "fingerprint": fingerprint(outputs),
        **(train.to_row("train") if train is not None else empty_row("train")),
        **(test.to_row("test") if test is not None else empty_row("test")),
        "duration_s": result.duration_s,
    }


def executions_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=EXECUTIONS_SCHEMA))


@dataclass
class PreparedRun:
    """Predictions ready for the sandbox: unparsable ones already have their final row.

    ``pending[j]`` = (row index, row base, task id, augmentation) of the program ``jobs[j]``.
    """

    rows: list[dict[str, Any] | None]
    pending: list[tuple[int, dict[str, Any], str, Augmentation]]
    jobs: list[tuple[str, list[np.ndarray]]]


# what scoring one program needs: row base, original task, augmentation, sandbox result (picklable)
ScoringItem = tuple[dict[str, Any], Task, Augmentation, ProgramResult]


def prepare_run(predictions: pl.DataFrame, tasks: Mapping[str, Task], rules: str = "strict") -> PreparedRun:
    """Extract each program and augment its task's train then test inputs with its parameters.

    ``rules`` (:mod:`arc_pipeline.scoring.rules`): under ``published`` some programs are refused
    before they run and the others get the researchers' output casting and checks.
    """
    check_predictions(predictions, tasks)
    inputs_cache: dict[tuple[str, Augmentation], list[Grid]] = {}
    prepared = PreparedRun([], [], [])
    for row in predictions.select(NEEDED_COLUMNS).iter_rows(named=True):
        base = {"prediction_id": row["prediction_id"], "task_id": row["task_id"], "turn": row["turn"]}
        task = tasks[row["task_id"]]
        program = apply_rules(extract_code(row["text"]), len(task.train) + len(task.test), rules)
        if program.run is None:
            prepared.rows.append(
                _failed_row(base, program.has_code, program.error_type or PARSING_CODE_FAILED, program.message, 0.0)
            )
            continue
        augmentation = Augmentation.from_row(row)
        key = (row["task_id"], augmentation)
        if key not in inputs_cache:  # the samples of one round share their augmentation
            inputs_cache[key] = _augmented_inputs(tasks[row["task_id"]], augmentation)
        prepared.pending.append((len(prepared.rows), base, row["task_id"], augmentation))
        prepared.rows.append(None)
        prepared.jobs.append((program.run, inputs_cache[key]))
    return prepared


def run_jobs(
    sandbox: Sandbox, prepared: PreparedRun, tasks: Mapping[str, Task], progress: bool = True
) -> list[ScoringItem]:
    """Run the prepared programs in the sandbox (one job each); what :func:`score_items` needs."""
    results = sandbox.run_many(prepared.jobs, progress=progress) if prepared.jobs else []
    if len(results) != len(prepared.jobs):
        raise RuntimeError(f"the sandbox returned {len(results)} results for {len(prepared.jobs)} jobs")
    return [
        (base, tasks[task_id], augmentation, result)
        for (_, base, task_id, augmentation), result in zip(prepared.pending, results)
    ]


def score_items(items: Sequence[ScoringItem]) -> list[dict[str, Any]]:
    """Un-augment, fingerprint and score each result (a module-level function: runs in a process pool)."""
    return [execution_row(base, task, augmentation, result) for base, task, augmentation, result in items]


def finish_run(prepared: PreparedRun, scored_rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """Put the scored rows back in the predictions' order: an EXECUTIONS_SCHEMA frame."""
    if len(scored_rows) != len(prepared.pending):
        raise RuntimeError(f"{len(scored_rows)} scored rows for {len(prepared.pending)} programs")
    rows = list(prepared.rows)
    for (index, *_), row in zip(prepared.pending, scored_rows):
        rows[index] = row
    return executions_frame(rows)  # type: ignore[arg-type]


def execute_predictions(
    predictions: pl.DataFrame,
    tasks: Mapping[str, Task],
    sandbox: Sandbox,
    progress: bool = True,
    rules: str = "strict",
) -> pl.DataFrame:
    """Run every prediction's program (one sandbox job each) and score it: an EXECUTIONS_SCHEMA frame.

    Rows keep the predictions' order, ``prediction_id``, ``task_id`` and ``turn``. Completions
    without a ```` ```python ```` block get ``ParsingCodeFailed`` and ``has_code`` False.
    """
    prepared = prepare_run(predictions, tasks, rules)
    items = run_jobs(sandbox, prepared, tasks, progress)
    return finish_run(prepared, score_items(items))
