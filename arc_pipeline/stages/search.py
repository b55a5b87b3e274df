"""Stage ``search``: the search in rounds at equal budget (``evaluate.search``; docs/scoring.md).

Reads the evaluation's baseline and every searching refiner's rounds, and writes into ``--output-dir``:

- ``search.parquet`` (``SEARCH_SCHEMA``): per schedule, refiner and round, ``is_correct`` with its 95% paired
  bootstrap interval over tasks, the gain over the base model's independent predictions at the same number of
  predictions per task, the Kaggle score of two voted attempts, and the round's new outputs against its
  predictions; independent sampling at every budget;
- ``search_tasks.parquet`` (``SEARCH_TASKS_SCHEMA``): the same per task (the canary's search check reads it);
- ``search.md`` / ``search.html``: a table per schedule, one column per round; ``search.png``: is_correct
  against predictions per task, a line per model.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.errors import PipelineError
from arc_pipeline.evaluation.html import page
from arc_pipeline.evaluation.plots import plot_search
from arc_pipeline.evaluation.search import search_markdown, search_points, search_sections, search_summary, search_tasks
from arc_pipeline.io import InputFileError, read_frame, write_table, write_text
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, SEARCH_SCHEMA, SEARCH_TASKS_SCHEMA
from arc_pipeline.stages.evaluate_config import SearchConfig
from arc_pipeline.task_files import read_tasks_by_id

log = logging.getLogger(__name__)

BOOTSTRAP_SAMPLES = 2000  # as the canary's verdict
BOOTSTRAP_SEED = 0
NOTE = (
    "is_correct = some prediction right on train and some on test, per task, after each round (columns: predictions "
    "per task spent). Each refiner's search starts from the schedule's first independent predictions and refines, "
    "each round, the best wrong programs it has found so far with their execution feedback; 'base, independent' is "
    "the base model's first predictions of the baseline at the same budget. Intervals: 95% paired bootstrap over "
    "tasks."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, required=True, help="evaluation tasks parquet (TASKS_SCHEMA)")
    parser.add_argument("--baseline-predictions", type=Path, required=True, help="baseline predictions parquet")
    parser.add_argument("--baseline", type=Path, required=True, help="baseline executions parquet")
    parser.add_argument(
        "--rounds",
        nargs="*",
        default=[],
        metavar="REFINER:PREFIX:EXECUTIONS",
        help="each round's executions: the refiner, the schedule prefix the round ends (64+64) and the parquet",
    )
    parser.add_argument("--output-dir", type=Path, required=True)
    add_config_argument(parser)


def parse_rounds(values: list[str]) -> dict[tuple[str, str], Path]:
    rounds = {}
    for value in values:
        parts = value.split(":", 2)
        if len(parts) != 3 or not all(parts):
            raise PipelineError(f"--rounds: {value!r} is not REFINER:PREFIX:EXECUTIONS")
        rounds[(parts[0], parts[1])] = Path(parts[2])
    return rounds


def run(args: argparse.Namespace) -> int:
    config = parse_config(args, SearchConfig)
    paths = parse_rounds(args.rounds)
    tasks = read_tasks_by_id([args.tasks])
    baseline = read_frame(args.baseline, EXECUTIONS_SCHEMA)
    baseline_predictions = read_frame(args.baseline_predictions, PREDICTIONS_SCHEMA)
    rounds = {key: read_frame(path, EXECUTIONS_SCHEMA) for key, path in paths.items()}
    predicted = set(baseline["task_id"].unique().to_list())
    for path, frame in [(args.baseline, baseline), *((paths[key], rounds[key]) for key in rounds)]:
        unknown = set(frame["task_id"].unique().to_list()) - set(tasks)
        if unknown:
            raise InputFileError(f"{path}: tasks not in {args.tasks}: {sorted(unknown)[:5]}")
    # only tasks that were predicted and whose test solutions are known can be scored
    scored = {
        task_id: task
        for task_id, task in tasks.items()
        if task_id in predicted and all(g is not None for g in task.test_outputs)
    }
    if len(scored) < len(predicted):
        log.warning("%d evaluated tasks have unknown test solutions: left out", len(predicted) - len(scored))
    if not scored:
        raise PipelineError(f"{args.tasks}: no evaluated task has known test solutions: nothing to score")
    refiners = list(dict.fromkeys(refiner for refiner, _ in rounds))
    try:
        points = search_points(baseline_predictions, baseline, rounds, config.schedules, refiners)
        per_task = search_tasks(points, scored, dict.fromkeys(scored, True))
        summary = search_summary(per_task, BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED)
    except ValueError as error:  # a round missing for a schedule: the message names it
        raise PipelineError(f"search: {error}") from None
    out: Path = args.output_dir
    write_table(per_task, out / "search_tasks.parquet", SEARCH_TASKS_SCHEMA)
    write_table(summary, out / "search.parquet", SEARCH_SCHEMA)
    sections = search_sections(summary)
    note = f"{len(scored)} evaluation tasks. {NOTE}"
    write_text(f"{note}\n\n{search_markdown(sections)}", out / "search.md")
    html_sections = [("", note, ""), *((heading, "", table) for heading, table in sections)]
    write_text(page("Search at equal budget", html_sections), out / "search.html")
    plot_search(summary, out / "search.png")
    for row in summary.filter(pl.col("refiner").is_not_null()).sort("predictions").iter_rows(named=True):
        log.info(
            "%s, %s, round %d (%d predictions): is_correct %.1f%%, new outputs %d of the round's %d predictions",
            row["schedule"],
            row["model"],
            row["round"],
            row["predictions"],
            row["is_correct"] * 100,
            row["new_outputs"],
            row["round_predictions"],
        )
    return 0
