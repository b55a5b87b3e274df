"""Per-run analyses beyond the metric table: pass@k curves, Kaggle scores and error shares.

Built on :mod:`arc_pipeline.scoring` (``passk``, ``voting``, ``submission``, ``tables``); this module
only applies them to every run and stacks the results in the ``RUN_*`` schemas.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from arc_pipeline.domain.tasks import Task
from arc_pipeline.evaluation.runs import Run
from arc_pipeline.schemas import ALWAYS_ERROR_TYPES
from arc_pipeline.scoring.passk import pass_at_k, task_counts
from arc_pipeline.scoring.submission import Submission, build_submission, score_submission
from arc_pipeline.scoring.tables import error_class, error_table, error_types_in_order, mean_row
from arc_pipeline.scoring.voting import vote

log = logging.getLogger(__name__)


def pass_at_k_curve(executions: pl.DataFrame, test_known: Mapping[str, bool], success: str = "solved") -> pl.DataFrame:
    """Mean unbiased pass@k over tasks for k = 1..(most predictions of any task).

    A task with fewer than k predictions counts with all it has (pass@n): in a refinement run the
    tasks whose first half had no wrong valid answer got no refinements, and drawing more from
    them is impossible, not a failure.
    """
    counts = task_counts(executions, success, test_known)
    if counts.height == 0:
        return pl.DataFrame(schema={"k": pl.Int64, "pass_at_k": pl.Float64})
    pairs = list(zip(counts["n"].to_list(), counts["c"].to_list()))
    max_k = max(n for n, _ in pairs)
    curve = [sum(pass_at_k(n, c, min(k, n)) for n, c in pairs) / len(pairs) for k in range(1, max_k + 1)]
    return pl.DataFrame(
        {"k": list(range(1, max_k + 1)), "pass_at_k": curve}, schema={"k": pl.Int64, "pass_at_k": pl.Float64}
    )


def runs_pass_at_k(runs: Sequence[Run], test_known: Mapping[str, bool], success: str = "solved") -> pl.DataFrame:
    """Every run's curve, stacked (``RUN_PASS_AT_K_SCHEMA``)."""
    frames = [
        pass_at_k_curve(run.executions, test_known, success).select(
            pl.lit(run.name).alias("run"), pl.lit(run.model).alias("model"), "k", "pass_at_k"
        )
        for run in runs
    ]
    return pl.concat(frames, how="vertical") if frames else pl.DataFrame()


@dataclass(frozen=True)
class KaggleResult:
    run: Run
    submission: Submission
    tasks: int
    test_inputs: int
    correct: int | None
    score: float | None


def kaggle_result(run: Run, tasks: Mapping[str, Task]) -> KaggleResult:
    """Two attempts per test input by voting (train-correct predictions first), scored when every
    task's test solutions are known."""
    submission = build_submission(vote(run.executions), tasks)
    test_inputs = sum(len(task.test) for task in tasks.values())
    if any(output is None for task in tasks.values() for output in task.test_outputs):
        log.info("run %s: some test solutions are unknown, the submission is not scored", run.name)
        return KaggleResult(run, submission, len(tasks), test_inputs, None, None)
    scores = score_submission(submission, tasks)
    return KaggleResult(
        run, submission, len(tasks), test_inputs, int(scores["correct"].sum()), float(scores["score"].mean())
    )


def best_kaggle(results: Sequence[KaggleResult], metrics: pl.DataFrame) -> KaggleResult:
    """The run with the best Kaggle score (the earliest on ties). Without scores (unknown
    solutions) the run with the best ``train_pass_rate``, the best guess without test answers."""
    if not results:
        raise ValueError("no runs to choose from")
    if all(result.score is not None for result in results):
        return max(results, key=lambda result: result.score)  # max keeps the first of equals
    pass_rate = dict(metrics.select("run", "train_pass_rate").rows())
    return max(results, key=lambda result: pass_rate.get(result.run.name) or 0.0)


def kaggle_table(results: Sequence[KaggleResult], best: KaggleResult) -> pl.DataFrame:
    """``RUN_KAGGLE_SCHEMA`` rows."""
    return pl.DataFrame(
        [
            {
                "run": r.run.name,
                **r.run.labels(),
                "tasks": r.tasks,
                "test_inputs": r.test_inputs,
                "correct": r.correct,
                "score": r.score,
                "best": r.run.name == best.run.name,
            }
            for r in results
        ],
        schema={
            "run": pl.String,
            "initial": pl.Int64,
            "refinement": pl.Int64,
            "model": pl.String,
            "tasks": pl.Int64,
            "test_inputs": pl.Int64,
            "correct": pl.Int64,
            "score": pl.Float64,
            "best": pl.Boolean,
        },
    )


def runs_errors(runs: Sequence[Run]) -> pl.DataFrame:
    """Per run the MEAN over tasks of each error type's share (``RUN_ERRORS_SCHEMA``), with the
    same error types for every run: ALWAYS_ERROR_TYPES, then the others by overall frequency."""
    if not runs:
        return pl.DataFrame(schema={"run": pl.String, "model": pl.String, "error_type": pl.String, "share": pl.Float64})
    everything = pl.concat([run.executions for run in runs], how="vertical")
    types = error_types_in_order(everything, ALWAYS_ERROR_TYPES)
    rows = []
    for run in runs:
        means = mean_row(error_table(run.executions, types))
        rows += [
            {"run": run.name, "model": run.model, "error_type": name, "share": float(means.get(name) or 0.0)}
            for name in types
        ]
    return pl.DataFrame(
        rows, schema={"run": pl.String, "model": pl.String, "error_type": pl.String, "share": pl.Float64}
    )


def errors_wide(errors: pl.DataFrame) -> pl.DataFrame:
    """One row per run (model label), one column per error type: for the markdown table."""
    if errors.height == 0:
        return pl.DataFrame()
    # only names of the closed vocabulary become columns, whatever the frame holds (a program's
    # exception name is data; see ERROR_TYPE_COLUMNS)
    classed = (
        errors.with_columns(error_class().alias("error_type"))
        .group_by("run", "model", "error_type", maintain_order=True)
        .agg(pl.col("share").sum())
    )
    types = list(dict.fromkeys(classed["error_type"].to_list()))
    wide = classed.pivot(on="error_type", index=["run", "model"], values="share", maintain_order=True)
    return wide.select("model", "run", *types)
