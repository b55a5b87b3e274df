"""Choosing wrong first-turn predictions to refine, and building their second-turn prompts.

docs/scoring.md. Training keeps one example per task: among the predictions with valid
outputs that do not get every train grid right, the one with the most correct train grids (then the
best train pixel score). Evaluation keeps every such prediction with a distinct output fingerprint and
cycles through them to make ``k`` prompts per task. Both build the prompt on the task augmented with
the chosen prediction's own parameters, so the model sees the frame it answered in.

Pure functions over polars frames and domain objects: the ``refine-dataset`` stage and the evaluation
stage share them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import polars as pl

from arc_pipeline.domain.augmentation import Augmentation
from arc_pipeline.domain.grids import as_grid, grids_to_lists
from arc_pipeline.domain.prompts import refinement_messages, render_refinement
from arc_pipeline.domain.tasks import Task
from arc_pipeline.sandbox.types import MAX_OUTPUT_SIDE_LIMIT

log = logging.getLogger(__name__)

# Ties are broken by prediction id so that the choice never depends on file order.
_SORT_COLUMNS = ["task_id", "train_correct_grids", "train_pixel_score", "prediction_id"]
_SORT_DESCENDING = [False, True, True, False]

# The prediction columns a refinement prompt needs (the rest comes from its execution row).
PREDICTION_COLUMNS = ["prediction_id", "hflip", "rot90_k", "color_map", "test_index", "text"]


def wrong_predictions(executions: pl.DataFrame) -> pl.DataFrame:
    """Predictions worth refining, best first within each task.

    Kept: valid outputs (``error_type`` null) and ``train_correct_grids < 1``. Order: task, then
    ``train_correct_grids`` and ``train_pixel_score`` descending, then prediction id.
    """
    return executions.filter(pl.col("error_type").is_null() & (pl.col("train_correct_grids") < 1)).sort(
        _SORT_COLUMNS, descending=_SORT_DESCENDING, nulls_last=True
    )


def select_for_training(executions: pl.DataFrame) -> pl.DataFrame:
    """One execution row per task: its best wrong prediction (tasks with none are absent)."""
    return wrong_predictions(executions).unique(subset=["task_id"], keep="first", maintain_order=True)


def select_for_evaluation(
    executions: pl.DataFrame, k: int = 8, refined_before: pl.Series | None = None
) -> pl.DataFrame:
    """``k`` execution rows per task, cycling through its wrong predictions with distinct outputs.

    Within a task the sorted wrong predictions are deduplicated by ``fingerprint`` (the best one of
    each fingerprint is kept), then prompt ``j`` (column ``refinement_index``, 0..k-1) refines the
    ``j mod n``-th of the ``n`` survivors. Tasks without a wrong valid prediction are absent.
    ``refined_before`` (prediction ids; the search's ``parents: best_unrefined``) moves those survivors
    behind the others, each group still best first.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    distinct = wrong_predictions(executions).unique(
        subset=["task_id", "fingerprint"], keep="first", maintain_order=True
    )
    if refined_before is not None:
        distinct = distinct.sort(
            "task_id", pl.col("prediction_id").is_in(refined_before.implode()), maintain_order=True
        )
    ranked = distinct.with_columns(pl.int_range(pl.len()).over("task_id").alias("_rank"))
    counts = ranked.group_by("task_id", maintain_order=True).agg(pl.len().alias("_n"))
    slots = counts.with_columns(pl.lit(list(range(k))).alias("refinement_index")).explode("refinement_index")
    slots = slots.with_columns(
        pl.col("refinement_index").cast(pl.Int16),
        (pl.col("refinement_index") % pl.col("_n")).alias("_rank"),
    )
    chosen = slots.join(ranked.with_columns(pl.col("_rank").cast(slots.schema["_rank"])), on=["task_id", "_rank"])
    return chosen.sort(["task_id", "refinement_index"]).drop(["_rank", "_n"])


def select_random(executions: pl.DataFrame, k: int, seed: int, round_index: int) -> pl.DataFrame:
    """``k`` execution rows per task drawn at random, with replacement, among its predictions with valid outputs
    (right or wrong): the search's mutation ``parents: random`` (docs/scoring.md). Column ``refinement_index``
    as in :func:`select_for_evaluation`; a task's draws depend on ``seed``, the round and its id alone."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    valid = executions.filter(pl.col("error_type").is_null()).sort(["task_id", "prediction_id"])
    picks = []
    for (task_id,), rows in valid.group_by("task_id", maintain_order=True):
        rng = np.random.default_rng([seed, round_index, *task_id.encode()])
        chosen = rows[rng.integers(rows.height, size=k).tolist()]
        picks.append(chosen.with_columns(pl.Series("refinement_index", list(range(k)), dtype=pl.Int16)))
    if not picks:
        return valid.with_columns(pl.lit(None, dtype=pl.Int16).alias("refinement_index")).head(0)
    return pl.concat(picks, how="vertical")


def attach_predictions(selected: pl.DataFrame, predictions: pl.DataFrame) -> pl.DataFrame:
    """Add each selected execution's prompt parameters and text from the predictions table.

    Fails naming the first prediction id that the predictions table lacks.
    """
    columns = predictions.select(PREDICTION_COLUMNS).unique(subset=["prediction_id"], keep="first")
    joined = selected.join(columns, on="prediction_id", how="left", coalesce=True)
    missing = joined.filter(pl.col("text").is_null())
    if missing.height:
        raise KeyError(
            f"{missing.height} selected predictions are missing from the predictions table, "
            f"e.g. {missing['prediction_id'][0]!r}"
        )
    return joined


def count_tokens(tokenizer: Any, text: str) -> int:
    """Tokens of an already rendered prompt (its special tokens are in the text)."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def refinement_example(
    task: Task, row: Mapping[str, Any], tokenizer: Any, with_feedback: bool = True
) -> dict[str, Any]:
    """A ``REFINEMENT_SCHEMA`` row for one selected prediction of ``task``.

    ``row`` holds the prediction's augmentation (``hflip``, ``rot90_k``, ``color_map``),
    ``test_index``, ``text`` and its execution's un-augmented ``train_outputs`` and scores. The
    augmentation is re-applied to the task and to those outputs: prompt and reward work in the frame
    the previous answer was written in. ``with_feedback=False``: the prompt leaves the execution feedback out
    (the search's mutation, :func:`arc_pipeline.domain.prompts.refinement_messages`).
    """
    augmentation = Augmentation.from_row(row)
    augmented = augmentation.apply_task(task)
    stored_outputs = row["train_outputs"]
    if stored_outputs is None or len(stored_outputs) != len(task.train):
        raise ValueError(
            f"task {task.task_id}: prediction {row['prediction_id']} has "
            f"{0 if stored_outputs is None else len(stored_outputs)} train outputs for {len(task.train)} train pairs"
        )
    # published rules store outputs up to 35 a side (arc_pipeline/scoring/rules.py)
    previous_outputs = [augmentation.apply(as_grid(grid, max_side=MAX_OUTPUT_SIDE_LIMIT)) for grid in stored_outputs]
    test_index = int(row["test_index"])
    messages = refinement_messages(augmented, test_index, row["text"], previous_outputs, with_feedback)
    prompt = render_refinement(tokenizer, messages)
    test_outputs = augmented.test_outputs
    return {
        "task_id": task.task_id,
        "prediction_id": row["prediction_id"],
        **augmentation.to_row(),
        "train_inputs": grids_to_lists(augmented.train_inputs),
        "train_outputs": grids_to_lists(augmented.train_outputs),
        "test_inputs": grids_to_lists(augmented.test_inputs),
        "test_outputs": None if any(g is None for g in test_outputs) else grids_to_lists(test_outputs),
        "test_index": test_index,
        "previous_text": row["text"],
        "previous_train_outputs": grids_to_lists(previous_outputs),
        "previous_train_correct_grids": float(row["train_correct_grids"]),
        "previous_train_pixel_score": float(row["train_pixel_score"]),
        "prompt": prompt,
        "prompt_tokens": count_tokens(tokenizer, prompt),
    }


def refinement_examples(
    tasks: Mapping[str, Task], rows: Iterable[Mapping[str, Any]], tokenizer: Any, with_feedback: bool = True
) -> list[dict[str, Any]]:
    """:func:`refinement_example` for every row; a row whose task is unknown fails naming it."""
    examples = []
    for row in rows:
        task = tasks.get(row["task_id"])
        if task is None:
            raise KeyError(f"prediction {row['prediction_id']}: task {row['task_id']!r} is not in the tasks files")
        examples.append(refinement_example(task, row, tokenizer, with_feedback))
    return examples


def drop_long_prompts(examples: list[dict[str, Any]], max_prompt_tokens: int | None) -> tuple[list[dict], int]:
    """Keep the examples whose prompt fits; return them and how many were dropped (logged)."""
    if max_prompt_tokens is None:
        return examples, 0
    kept = [example for example in examples if example["prompt_tokens"] <= max_prompt_tokens]
    dropped = len(examples) - len(kept)
    if dropped:
        longest = max(example["prompt_tokens"] for example in examples)
        log.warning(
            "dropped %d of %d refinement prompts longer than %d tokens (longest %d)",
            dropped,
            len(examples),
            max_prompt_tokens,
            longest,
        )
    return kept, dropped
