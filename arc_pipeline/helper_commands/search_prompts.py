"""Helper ``arc-pipeline search-prompts`` (rules/search.smk): the prompts of one round of a refiner's search.

A search (``evaluate.search``, docs/scoring.md "Search in rounds") spends a budget of predictions per task: the
first ``--initial`` baseline predictions of each task (the rounds sampled first), then rounds of refinements. Round
``r``'s prompts are chosen among everything this refiner has made for the task so far: those initial predictions
and the refiner's own refinements of rounds 1..r-1 (``--earlier-executions``). The choice is refine-prompts' own
(:func:`arc_pipeline.refinement.select_for_evaluation`: valid outputs, not right on every train pair, distinct
outputs, best train score first, cycled to ``refinement_prompts`` per task), and each prompt holds one earlier
program with its execution feedback, in the frame that program was written in: the format the refiner was trained
on. ``parents: best_unrefined`` puts the programs an earlier round refined behind the others, so that a round
sends a prompt again only when nothing new is left to refine. The mutation settings (``parents: random``,
``feedback: false``) exist for the canary, which must notice them.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Literal

import polars as pl
from pydantic import Field

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.tasks import Task
from arc_pipeline.errors import PipelineError
from arc_pipeline.evaluation.runs import first_half
from arc_pipeline.helper_commands.refine_prompts import RefinePromptsConfig, add_baseline_arguments, render_prompts
from arc_pipeline.io import InputFileError, read_frame, write_table
from arc_pipeline.refinement import attach_predictions, select_for_evaluation, select_random
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA
from arc_pipeline.task_files import read_tasks_by_id

log = logging.getLogger(__name__)


class SearchPromptsConfig(RefinePromptsConfig):
    """refine-prompts' settings (``refinement_prompts`` = this round's prompts per task, and the refinement
    inference's context) plus the search's selection (``evaluate.search``) and the round."""

    round: int = Field(ge=1, description="the round these prompts start (1 = the first refinement round)")
    parents: Literal["best_wrong", "best_unrefined", "random"] = Field(
        "best_wrong", description="see evaluate.search.parents"
    )
    feedback: bool = Field(True, description="see evaluate.search.feedback")
    seed: int = Field(0, description="seed of the random parents")


def configure(parser: argparse.ArgumentParser) -> None:
    add_baseline_arguments(parser)
    parser.add_argument("--initial", type=int, required=True, help="independent predictions per task it starts from")
    parser.add_argument(
        "--earlier-predictions",
        type=Path,
        nargs="*",
        default=[],
        help="this refiner's predictions of the earlier rounds of this search (PREDICTIONS_SCHEMA), in round order",
    )
    parser.add_argument(
        "--earlier-executions", type=Path, nargs="*", default=[], help="their executions, in the same order"
    )
    parser.add_argument("--model", type=Path, required=True, help="model folder (its tokenizer renders the prompts)")
    parser.add_argument("--output", type=Path, required=True, help="refinement prompts parquet (REFINEMENT_SCHEMA)")
    parser.add_argument("--dropped", type=Path, help="the prompts dropped as too long (REFINEMENT_SCHEMA)")
    add_config_argument(parser)


def search_pool(
    baseline_predictions: pl.DataFrame,
    baseline_executions: pl.DataFrame,
    initial: int,
    earlier_predictions: list[pl.DataFrame],
    earlier_executions: list[pl.DataFrame],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every program the search has so far, per task: the executions of the first ``initial`` baseline predictions
    and of the earlier rounds, and the predictions they belong to."""
    initial_executions = first_half(baseline_executions.filter(pl.col("turn") == 1), baseline_predictions, initial)
    columns = initial_executions.columns
    executions = pl.concat([initial_executions, *(frame.select(columns) for frame in earlier_executions)])
    predictions = pl.concat([baseline_predictions, *earlier_predictions], how="vertical_relaxed")
    return executions, predictions


def select_parents(executions: pl.DataFrame, predictions: pl.DataFrame, config: SearchPromptsConfig) -> pl.DataFrame:
    """The execution rows this round refines, ``refinement_prompts`` per task (tasks without one are absent)."""
    if config.parents == "random":
        return select_random(executions, config.refinement_prompts, config.seed, config.round)
    last = refined_before(predictions) if config.parents == "best_unrefined" else None
    return select_for_evaluation(executions, config.refinement_prompts, refined_before=last)


def refined_before(predictions: pl.DataFrame) -> pl.Series:
    """The prediction ids an earlier round of this search refined (its predictions' parents)."""
    return predictions["parent_prediction_id"].drop_nulls().unique()


def build_round(
    tasks: dict[str, Task],
    pool: tuple[pl.DataFrame, pl.DataFrame],
    tokenizer,
    config: SearchPromptsConfig,
) -> tuple[list[dict], list[dict], dict[str, int]]:
    """The round's REFINEMENT_SCHEMA rows kept, those dropped as too long, and counts."""
    executions, predictions = pool
    selected = attach_predictions(select_parents(executions, predictions, config), predictions)
    kept, too_long, counts = render_prompts(
        tasks, selected, tokenizer, config.max_prompt_tokens(tokenizer), config.feedback
    )
    counts = {"round": config.round, "programs_so_far": executions.height, **counts}
    counts["parents_refined_before"] = parents_refined_before(selected, predictions)
    return kept, too_long, counts


def parents_refined_before(selected: pl.DataFrame, predictions: pl.DataFrame) -> int:
    """How many of the round's parents an earlier round of this search refined already: its prompt is that
    round's prompt again, so a refiner that answers a prompt the same way every time adds nothing with it."""
    return selected.filter(pl.col("prediction_id").is_in(refined_before(predictions).implode())).height


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.models.folder import load_tokenizer

    config = parse_config(args, SearchPromptsConfig)
    if args.initial < 1:
        raise PipelineError(f"--initial must be at least 1, got {args.initial}")
    if (
        len(args.earlier_predictions) != len(args.earlier_executions)
        or len(args.earlier_executions) != config.round - 1
    ):
        raise PipelineError(
            f"round {config.round} needs the predictions and executions of its {config.round - 1} earlier rounds; "
            f"got {len(args.earlier_predictions)} and {len(args.earlier_executions)} files"
        )
    tasks = read_tasks_by_id([args.tasks])
    baseline_predictions = read_frame(args.predictions, PREDICTIONS_SCHEMA)
    baseline_executions = read_frame(args.executions, EXECUTIONS_SCHEMA)
    earlier_predictions = [read_frame(path, PREDICTIONS_SCHEMA) for path in args.earlier_predictions]
    earlier_executions = [read_frame(path, EXECUTIONS_SCHEMA) for path in args.earlier_executions]
    for path, frame in [(args.executions, baseline_executions), *zip(args.earlier_executions, earlier_executions)]:
        unknown = set(frame["task_id"].unique().to_list()) - set(tasks)
        if unknown:
            raise InputFileError(f"{path}: tasks not in {args.tasks}: {sorted(unknown)[:5]}")
    pool = search_pool(baseline_predictions, baseline_executions, args.initial, earlier_predictions, earlier_executions)
    tokenizer = load_tokenizer(args.model)
    try:
        rows, dropped, counts = build_round(tasks, pool, tokenizer, config)
    except (ValueError, KeyError) as error:  # a config without room for a prompt, a parent missing its prediction
        raise PipelineError(f"search-prompts, round {config.round}: {error}") from None
    log.info("search prompts: %s", ", ".join(f"{key} {value}" for key, value in counts.items()))
    if not rows:
        log.warning("round %d: no task has an earlier program to refine: no prompts", config.round)
    write_table(rows, args.output, REFINEMENT_SCHEMA)
    if args.dropped is not None:
        write_table(dropped, args.dropped, REFINEMENT_SCHEMA)
    return 0
