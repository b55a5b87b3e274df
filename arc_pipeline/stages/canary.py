"""Stage ``canary``: the learning canary's verdict (docs/canary.md, ``config/canary.yaml``).

Reads the training metrics and the evaluation's per-task table, decides pass or fail
(:mod:`arc_pipeline.evaluation.canary`) and writes into ``--output-dir``: ``verdict.json`` (every number),
``verdict.md`` (the table a person reads) and ``canary.png`` (the reward curve, and held-out ``is_correct``
per run with 95% bootstrap intervals over tasks). A failed canary is a finished job with a FAILED verdict,
logged as an error, so that its tables and figure stay for inspection.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.errors import PipelineError
from arc_pipeline.io import read_frame, write_text
from arc_pipeline.schemas import RUN_TASK_METRICS_SCHEMA, SEARCH_TASKS_SCHEMA, TRAINING_METRICS_SCHEMA

log = logging.getLogger(__name__)


class CanaryConfig(BaseModel):
    """The learning canary's pass thresholds (docs/canary.md); ``enabled`` adds its job to the workflow."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="add the canary's verdict to the run (config/canary.yaml sets it)")
    min_reward_ratio: float = Field(
        1.5,
        gt=0,
        description="the mean training reward of the steps after the first window over the first window's must "
        "reach this",
    )
    min_last_window_ratio: float = Field(
        1.0,
        ge=0,
        description="the last window's mean training reward over the first window's must reach this (a policy "
        "that collapsed at the end falls below where it began)",
    )
    min_is_correct_gain: float = Field(
        0.15, description="RL-refiner minus base refines held-out is_correct (a share) must reach this"
    )
    min_sft_gain: float = Field(
        0.15,
        description="SFT-refiner minus base refines held-out is_correct (a share) must reach this; checked when "
        "the evaluation has the SFT refiner (sft.enabled)",
    )
    min_search_gain: float = Field(
        0.15,
        description="with evaluate.search: the RL-refiner's search minus base refines' search, held-out is_correct "
        "(a share) at each schedule's full budget, must reach this",
    )
    window: float = Field(0.2, gt=0, le=0.5, description="share of the logged steps in each reward window")
    bootstrap_samples: PositiveInt = Field(2000, description="paired bootstrap resamples of the tasks")
    seed: int = Field(0, description="seed of the bootstrap")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--training-metrics", type=Path, required=True, help="TRAINING_METRICS_SCHEMA parquet")
    parser.add_argument("--tasks", type=Path, required=True, help="the evaluation's tasks.parquet (per-task table)")
    parser.add_argument(
        "--reward-metric", required=True, help="training metric of the ARC reward, e.g. rewards/<train.reward>/mean"
    )
    parser.add_argument(
        "--search", type=Path, help="the search's per-task table (SEARCH_TASKS_SCHEMA), with evaluate.search"
    )
    parser.add_argument("--output-dir", type=Path, required=True)
    add_config_argument(parser)


def run(args: argparse.Namespace) -> int:
    from arc_pipeline.evaluation.canary import (
        BASELINE_RUN,
        bootstrap_means,
        decide,
        plot_canary,
        reward_curve,
        reward_windows,
        verdict_markdown,
        verdict_runs,
    )
    from arc_pipeline.evaluation.canary_search import search_checks

    config = parse_config(args, CanaryConfig)
    metrics = read_frame(args.training_metrics, TRAINING_METRICS_SCHEMA)
    tasks = read_frame(args.tasks, RUN_TASK_METRICS_SCHEMA)
    try:
        windows = reward_windows(metrics, args.reward_metric, config.window)
        runs = verdict_runs(tasks)
        estimates = bootstrap_means(tasks, runs, config.bootstrap_samples, config.seed)
    except ValueError as error:
        raise PipelineError(f"canary: {error} ({args.training_metrics}, {args.tasks})") from None
    search = None
    if args.search is not None:
        try:
            search = search_checks(read_frame(args.search, SEARCH_TASKS_SCHEMA), config.bootstrap_samples, config.seed)
        except ValueError as error:
            raise PipelineError(f"canary: {error} ({args.search})") from None
    heldout = tasks.filter(tasks["run"] == BASELINE_RUN).height
    verdict = decide(
        windows,
        estimates,
        heldout,
        config.min_reward_ratio,
        config.min_is_correct_gain,
        config.min_sft_gain,
        search,
        config.min_search_gain,
        config.min_last_window_ratio,
    )
    output = args.output_dir
    write_text(json.dumps(verdict.to_json(), indent=2) + "\n", output / "verdict.json")
    write_text(verdict_markdown(verdict, args.reward_metric), output / "verdict.md")
    plot_canary(reward_curve(metrics, args.reward_metric), verdict, output / "canary.png")
    if verdict.passed:
        log.info(
            "learning canary PASSED: reward %.2fx, gain %+.1f points", verdict.reward_ratio, verdict.gain["mean"] * 100
        )
    else:
        log.error("learning canary FAILED: %s", "; ".join(verdict.reasons))
    return 0
