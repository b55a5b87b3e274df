"""Stage ``refine_dataset``: the second-turn (refinement) training set, one prompt per task.

Per task the best wrong first-turn prediction (docs/scoring.md, :mod:`arc_pipeline.refinement`)
becomes a refinement prompt built on the task augmented like that prediction, rendered with the
model's chat template. Prompts longer than ``--max-prompt-tokens`` are dropped and counted, because
training would otherwise have no room left for the completion. That limit belongs to training
(``TrainConfig.max_prompt_tokens``: ``max_seq_length - max_completion_length``); the workflow passes it.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.tasks import Task
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.refinement import (
    attach_predictions,
    drop_long_prompts,
    refinement_examples,
    select_for_training,
)
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA
from arc_pipeline.task_files import read_tasks_by_id

log = logging.getLogger(__name__)


class RefineDatasetConfig(BaseModel):
    """Which first-turn predictions the training set's refinement prompts are built from."""

    model_config = ConfigDict(extra="forbid")

    turn: int | None = Field(
        1, description="refine only predictions of this turn (1 = first turn); None uses every row"
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, nargs="+", required=True, help="tasks parquet(s) (TASKS_SCHEMA)")
    parser.add_argument("--predictions", type=Path, nargs="+", required=True, help="predictions parquet(s)")
    parser.add_argument("--executions", type=Path, nargs="+", required=True, help="executions parquet(s)")
    parser.add_argument("--model", type=Path, required=True, help="model folder (its tokenizer renders the prompts)")
    parser.add_argument("--output", type=Path, required=True, help="refinement parquet (REFINEMENT_SCHEMA)")
    parser.add_argument(
        "--max-prompt-tokens",
        type=int,
        help="drop prompts longer than this: training's limit, "
        "train.max_seq_length - train.max_completion_length (the workflow passes it); "
        "default: keep every prompt",
    )
    add_config_argument(parser)


def read_all(paths: list[Path], schema) -> pl.DataFrame:
    return pl.concat([read_frame(path, schema) for path in paths], how="vertical")


def build_dataset(
    tasks: dict[str, Task],
    predictions: pl.DataFrame,
    executions: pl.DataFrame,
    tokenizer,
    config: RefineDatasetConfig,
    max_prompt_tokens: int | None,
) -> tuple[list[dict], dict[str, int]]:
    """The refinement rows and counts of what happened (tasks seen, selected, dropped, kept)."""
    if config.turn is not None:
        executions = executions.filter(pl.col("turn") == config.turn)
    selected = attach_predictions(select_for_training(executions), predictions)
    examples = refinement_examples(tasks, selected.iter_rows(named=True), tokenizer)
    kept, dropped = drop_long_prompts(examples, max_prompt_tokens)
    counts = {
        "tasks_with_executions": executions["task_id"].n_unique(),
        "tasks_selected": len(examples),
        "dropped_too_long": dropped,
        "kept": len(kept),
    }
    if examples:
        no_train_grid = sum(example["previous_train_correct_grids"] == 0 for example in examples)
        counts["chosen_without_any_train_grid_right"] = no_train_grid
    return kept, counts


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import load_tokenizer

    config = parse_config(args, RefineDatasetConfig)
    tasks = read_tasks_by_id(args.tasks)
    predictions = read_all(args.predictions, PREDICTIONS_SCHEMA)
    executions = read_all(args.executions, EXECUTIONS_SCHEMA)
    tokenizer = load_tokenizer(args.model)
    rows, counts = build_dataset(tasks, predictions, executions, tokenizer, config, args.max_prompt_tokens)
    log.info("refinement dataset: %s", ", ".join(f"{key} {value}" for key, value in counts.items()))
    if not rows:
        log.warning("no task has a wrong prediction with valid outputs: the refinement dataset is empty")
    write_table(rows, args.output, REFINEMENT_SCHEMA)
    return 0
