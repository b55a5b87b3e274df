"""Helper ``arc-pipeline refine-prompts`` (rules/evaluate.smk): the evaluation's refinement prompts, per task.

From the first ``--first-predictions`` baseline predictions of each evaluation task (the rounds
sampled first, :func:`arc_pipeline.evaluation.runs.first_half`), the wrong ones with valid outputs and
distinct fingerprints, best first, are cycled through to make K prompts per task (docs/scoring.md,
:func:`arc_pipeline.refinement.select_for_evaluation`). Each prompt is built on the task
augmented like the prediction it refines. The inference stage then samples each prompt ``n`` times,
so a task gets K x n refinements (published run: 8 x 8 = 64). Tasks without a wrong valid prediction get none.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.tasks import Task
from arc_pipeline.errors import PipelineError
from arc_pipeline.evaluation.runs import first_half
from arc_pipeline.generation.engine import added_prompt_tokens, prompt_token_limit
from arc_pipeline.io import InputFileError, read_frame, write_table
from arc_pipeline.refinement import attach_predictions, drop_long_prompts, refinement_examples, select_for_evaluation
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA
from arc_pipeline.task_files import read_tasks_by_id

log = logging.getLogger(__name__)


class RefinePromptsConfig(BaseModel):
    """``evaluate.refinement_prompts`` plus the refinement inference's context: the workflow passes
    the context length (``evaluate.refinement_max_model_len``, else ``inference.max_model_len``),
    ``inference.max_tokens`` and ``inference.double_bos``. A prompt is dropped here exactly when the
    refinement inference could not sample it, so every drop is counted in one place."""

    model_config = ConfigDict(extra="forbid")

    refinement_prompts: int = Field(
        8,
        ge=1,
        description="prompts per task, cycling through its distinct "
        "wrong predictions (published run: 8, each sampled 8 times)",
    )
    max_model_len: int = Field(
        9700, gt=0, description="context length of the refinement inference (published refinement evaluation: 14,500)"
    )
    max_tokens: int = Field(1024, ge=1, description="completion tokens of the refinement inference")
    double_bos: bool = Field(False, description="the refinement inference adds a second BOS (one more token)")

    def max_prompt_tokens(self, tokenizer) -> int:
        """The longest prompt kept, counted as REFINEMENT_SCHEMA's ``prompt_tokens`` (rendered text)."""
        limit = prompt_token_limit(self.max_model_len, self.max_tokens) - added_prompt_tokens(
            tokenizer, self.double_bos
        )
        if limit < 1:
            raise ValueError(
                f"max_tokens {self.max_tokens} leaves no room for a prompt in max_model_len {self.max_model_len}"
            )
        return limit


def add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    """The evaluation's tasks and its baseline's predictions and executions, which refinement prompts start from
    (here and in search-prompts)."""
    parser.add_argument("--tasks", type=Path, required=True, help="evaluation tasks parquet (TASKS_SCHEMA)")
    parser.add_argument("--predictions", type=Path, required=True, help="baseline predictions parquet")
    parser.add_argument("--executions", type=Path, required=True, help="baseline executions parquet")


def configure(parser: argparse.ArgumentParser) -> None:
    add_baseline_arguments(parser)
    parser.add_argument("--model", type=Path, required=True, help="model folder (its tokenizer renders the prompts)")
    parser.add_argument(
        "--first-predictions",
        type=int,
        required=True,
        help="refine only the first N predictions of each task (n_eval / 2)",
    )
    parser.add_argument("--output", type=Path, required=True, help="refinement prompts parquet (REFINEMENT_SCHEMA)")
    parser.add_argument(
        "--dropped",
        type=Path,
        help="the prompts dropped as too long (REFINEMENT_SCHEMA); the evaluation report counts them per run",
    )
    add_config_argument(parser)


def render_prompts(
    tasks: dict[str, Task], selected: pl.DataFrame, tokenizer, max_prompt_tokens: int, with_feedback: bool = True
) -> tuple[list[dict], list[dict], dict[str, int]]:
    """The REFINEMENT_SCHEMA rows of ``selected`` (execution rows with their predictions' columns, in prompt
    order) that fit ``max_prompt_tokens``, those that do not, and counts. A prediction chosen several times
    (fewer distinct parents than prompts) is rendered once. Shared with ``search-prompts``."""
    distinct = selected.unique(subset=["prediction_id"], keep="first", maintain_order=True)
    rendered = {
        row["prediction_id"]: row
        for row in refinement_examples(tasks, distinct.iter_rows(named=True), tokenizer, with_feedback)
    }
    examples = [rendered[prediction_id] for prediction_id in selected["prediction_id"].to_list()]
    kept, dropped = drop_long_prompts(examples, max_prompt_tokens)
    too_long = [example for example in examples if example["prompt_tokens"] > max_prompt_tokens]
    counts = {
        "tasks_with_wrong_predictions": selected["task_id"].n_unique(),
        "distinct_predictions_refined": distinct.height,
        "prompts": len(examples),
        "dropped_too_long": dropped,
        "kept": len(kept),
        "tasks_losing_all_refinements": len({e["task_id"] for e in too_long} - {e["task_id"] for e in kept}),
        "max_prompt_tokens": max_prompt_tokens,
    }
    return kept, too_long, counts


def build_prompts(
    tasks: dict[str, Task],
    predictions: pl.DataFrame,
    executions: pl.DataFrame,
    tokenizer,
    first_predictions: int,
    config: RefinePromptsConfig,
) -> tuple[list[dict], list[dict], dict[str, int]]:
    """REFINEMENT_SCHEMA rows kept (task by task, K each, in cycling order), those dropped as too long,
    and counts of what happened."""
    half = first_half(executions.filter(pl.col("turn") == 1), predictions, first_predictions)
    selected = attach_predictions(select_for_evaluation(half, k=config.refinement_prompts), predictions)
    kept, too_long, counts = render_prompts(tasks, selected, tokenizer, config.max_prompt_tokens(tokenizer))
    counts = {"tasks": executions["task_id"].n_unique(), "first_half_predictions": half.height, **counts}
    return kept, too_long, counts


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import load_tokenizer

    config = parse_config(args, RefinePromptsConfig)
    if args.first_predictions < 1:
        raise PipelineError(f"--first-predictions must be at least 1, got {args.first_predictions}")
    tasks = read_tasks_by_id([args.tasks])
    predictions = read_frame(args.predictions, PREDICTIONS_SCHEMA)
    executions = read_frame(args.executions, EXECUTIONS_SCHEMA)
    unknown = set(executions["task_id"].unique().to_list()) - set(tasks)
    if unknown:
        raise InputFileError(f"{args.executions}: tasks not in {args.tasks}: {sorted(unknown)[:5]}")
    tokenizer = load_tokenizer(args.model)
    try:
        rows, dropped, counts = build_prompts(tasks, predictions, executions, tokenizer, args.first_predictions, config)
    except ValueError as error:  # the config leaves no room for a prompt: the message names the fields
        raise PipelineError(str(error)) from None
    log.info("refinement prompts: %s", ", ".join(f"{key} {value}" for key, value in counts.items()))
    if not rows:
        log.warning("no task has a wrong first-half prediction with valid outputs: no refinement prompts")
    write_table(rows, args.output, REFINEMENT_SCHEMA)
    if args.dropped is not None:
        write_table(dropped, args.dropped, REFINEMENT_SCHEMA)
    return 0
