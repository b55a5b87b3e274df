"""Rejection sampling of the SFT refiner's training set: the base model's own second-turn answers that
solved their task.

Inputs are three tables the pipeline already writes: the refinement prompts (``REFINEMENT_SCHEMA``, one per
task), ``k`` sampled completions of each (``PREDICTIONS_SCHEMA``, turn 2, ``parent_prediction_id`` = the
prompt's ``prediction_id``) and their executions (``EXECUTIONS_SCHEMA``). A completion is kept when it
solved its task the way the GRPO reward's full score and the tables' ``solved`` count it: every train and
every test grid right, compared un-augmented (execution undoes the prompt's augmentation; docs/scoring.md).
Kept are also only answers that stopped on their own: a truncated one teaches the model never to stop
(the stop token would be appended to text the model did not end). Per task, completions with the same
program (the code block, else the whole text) are kept once, and at most ``max_per_task`` in the order of
their prediction ids, so a rerun keeps the same rows.

``keep_failed`` turns the selection around (every completion that did not solve its task, with the same
rules): the canary's mutation run, whose SFT refiner must not pass (docs/canary.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl

from arc_pipeline.sandbox.program import extract_code


@dataclass(frozen=True)
class SelectionCounts:
    """What happened to the completions, for the summary json and the log."""

    prompts: int
    prompts_sampled: int  # prompts with at least one completion (the rest were too long for inference)
    completions: int
    solved: int
    truncated_solved: int  # selected (solved, or failed with keep_failed) but cut at max_tokens: dropped
    duplicates: int  # same program as a kept completion of the task: dropped
    over_cap: int  # beyond max_per_task: dropped
    kept: int
    prompts_with_success: int  # prompts with at least one kept completion

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class SelectionInputError(ValueError):
    """The three tables do not belong together; the message says which table and which rows."""


def _program_key(text: str) -> str:
    """What counts as the same program: the code block without surrounding blank space, else the text."""
    code = extract_code(text)
    return (code if code is not None else text).strip()


def _check_links(refinements: pl.DataFrame, predictions: pl.DataFrame, executions: pl.DataFrame) -> None:
    duplicated = refinements.filter(pl.col("prediction_id").is_duplicated())["prediction_id"].unique().to_list()
    if duplicated:
        raise SelectionInputError(f"refinements: prediction_id not unique: {sorted(duplicated)[:5]}")
    orphans = predictions.join(
        refinements.select(pl.col("prediction_id").alias("parent_prediction_id")), on="parent_prediction_id", how="anti"
    )
    if orphans.height:
        shown = orphans["prediction_id"].head(5).to_list()
        raise SelectionInputError(
            f"predictions: {orphans.height} row(s) whose parent_prediction_id is no refinement prompt's "
            f"prediction_id (first: {shown}); were they sampled from another refinement file?"
        )
    unexecuted = predictions.join(executions.select("prediction_id"), on="prediction_id", how="anti")
    if unexecuted.height:
        shown = unexecuted["prediction_id"].head(5).to_list()
        raise SelectionInputError(
            f"executions: no row for {unexecuted.height} prediction(s) (first: {shown}); "
            "were they executed from another predictions file?"
        )


def select_solutions(
    refinements: pl.DataFrame,
    predictions: pl.DataFrame,
    executions: pl.DataFrame,
    max_per_task: int,
    keep_failed: bool = False,
) -> tuple[pl.DataFrame, SelectionCounts]:
    """The kept rows (``SFT_DATASET_SCHEMA`` columns) and the counts. Raises :class:`SelectionInputError`."""
    _check_links(refinements, predictions, executions)
    solved_flag = (pl.col("train_is_correct").fill_null(False) & pl.col("test_is_correct").fill_null(False)).alias(
        "solved"
    )
    scored = predictions.join(
        executions.select("prediction_id", solved_flag), on="prediction_id", how="left"
    ).with_columns(pl.col("solved").fill_null(False))
    solved = scored.filter(pl.col("solved"))
    selected = scored.filter(~pl.col("solved")) if keep_failed else solved
    stopped = selected.filter(pl.col("finish_reason") != "length")
    prompts = refinements.select(
        pl.col("prediction_id").alias("parent_prediction_id"), "prompt", pl.col("prompt_tokens").alias("_prompt_tokens")
    )
    candidates = (
        stopped.join(prompts, on="parent_prediction_id", how="inner")
        .with_columns(pl.col("text").map_elements(_program_key, return_dtype=pl.String).alias("_program"))
        .sort("task_id", "prediction_id")
    )
    unique = candidates.unique(subset=["task_id", "_program"], keep="first", maintain_order=True)
    kept = unique.filter(pl.int_range(pl.len()).over("task_id") < max_per_task)
    rows = kept.select(
        "task_id",
        "prompt",
        pl.col("text").alias("completion"),
        "prediction_id",
        pl.col("parent_prediction_id").alias("source_prediction_id"),
        pl.col("_prompt_tokens").alias("prompt_tokens"),
        "completion_tokens",
    )
    counts = SelectionCounts(
        prompts=refinements.height,
        prompts_sampled=predictions["parent_prediction_id"].n_unique(),
        completions=predictions.height,
        solved=solved.height,
        truncated_solved=selected.height - stopped.height,
        duplicates=candidates.height - unique.height,
        over_cap=unique.height - kept.height,
        kept=kept.height,
        prompts_with_success=kept["parent_prediction_id"].n_unique(),
    )
    return rows, counts
