"""Stage ``evaluate``: does the RL refiner help? Tables, Kaggle scores, pass@k and figures.

Runs (:mod:`arc_pipeline.evaluation.runs`): the baseline (``n_eval`` first-turn predictions per
task) and, per refiner, the first ``n_eval / 2`` of them plus that refiner's refinements. Writes
into ``--output-dir``:

- ``runs.md`` / ``runs.html`` / ``runs.parquet``: one row per run in the published format
  (docs/defaults.md: ``initial | refinement | model | valid code ... is_correct``) plus the strict ``solved``;
  ``tasks.parquet``: every run's per-task table.
- ``published.md`` / ``published.html`` (only with ``compare_with_published``): beside the published rows
  (docs/defaults.md).
- ``kaggle.md`` / ``kaggle.html`` / ``kaggle.parquet``: two attempts per test input by voting, scored;
  ``submission.json``: the best run's submission, validated.
- ``errors.md`` / ``errors.html`` / ``errors.parquet`` / ``errors.png``: error analysis per run.
- ``passk.parquet`` / ``passk.png``: unbiased pass@k curves; ``training.png``: the training curves.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.tasks import Task
from arc_pipeline.errors import PipelineError
from arc_pipeline.evaluation import analysis, plots
from arc_pipeline.evaluation.html import page
from arc_pipeline.evaluation.published import comparison_table
from arc_pipeline.evaluation.runs import (
    build_runs,
    results_table,
    run_task_metrics,
    seeds_table,
    with_dropped_prompts,
)
from arc_pipeline.io import InputFileError, read_frame, write_table, write_text
from arc_pipeline.schemas import (
    EXECUTIONS_SCHEMA,
    PREDICTIONS_SCHEMA,
    REFINEMENT_SCHEMA,
    RUN_ERRORS_SCHEMA,
    RUN_KAGGLE_SCHEMA,
    RUN_PASS_AT_K_SCHEMA,
    RUN_TASK_METRICS_SCHEMA,
    RUNS_SCHEMA,
    TRAINING_METRICS_SCHEMA,
)
from arc_pipeline.scoring.legend import METRICS_LEGEND, with_legend
from arc_pipeline.scoring.submission import read_submission, validate_submission, write_submission
from arc_pipeline.scoring.tables import common_errors, to_markdown
from arc_pipeline.stages.evaluate_config import EvaluateConfig
from arc_pipeline.task_files import read_tasks_by_id

log = logging.getLogger(__name__)

PASS_AT_K_SUCCESS = "solved"  # a draw succeeds when one prediction is right on train and test
COMMON_ERRORS_PER_RUN = 10

OUTPUT_FILES = (
    "runs.md",
    "runs.html",
    "runs.parquet",
    "tasks.parquet",
    "kaggle.md",
    "kaggle.html",
    "kaggle.parquet",
    "submission.json",
    "errors.md",
    "errors.html",
    "errors.parquet",
    "errors.png",
    "passk.parquet",
    "passk.png",
    "training.png",
    "tasks.md",
    "tasks.html",
    "examples.png",
)
PUBLISHED_FILES = ("published.md", "published.html")
DROPPED_LEGEND = (
    "dropped prompts = refinement prompts longer than the refinement context allows "
    "(evaluate.refinement_max_model_len - inference.max_tokens), never sampled; '-' = none to drop "
    "(baseline) or not counted. adapter = the adapter folder whose refinements the run holds ('-': the base model)."
)


def solved_by_run(per_task: pl.DataFrame) -> pl.DataFrame:
    """One row per task, one column per run: 'solved', or the test pixel score when not solved."""
    cell = (
        pl.when(pl.col("solved") == 1.0)
        .then(pl.lit("solved"))
        .when(pl.col("test_pixel_score").is_null())
        .then(pl.lit("?"))
        .otherwise((pl.col("test_pixel_score") * 100).round(0).cast(pl.Int64).cast(pl.String) + "% px")
    )
    runs = per_task["run"].unique(maintain_order=True).to_list()
    return (
        per_task.select("task_id", "run", cell.alias("cell"))
        .pivot(on="run", index="task_id", values="cell")
        .select("task_id", *runs)
        .sort("task_id")
    )


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, required=True, help="evaluation tasks parquet (TASKS_SCHEMA)")
    parser.add_argument("--baseline-predictions", type=Path, required=True, help="baseline predictions parquet")
    parser.add_argument("--baseline", type=Path, required=True, help="baseline executions parquet")
    parser.add_argument(
        "--refiners", nargs="*", default=[], help="refiner names (base, rl, sft, sft_rl, extra adapters)"
    )
    parser.add_argument(
        "--refinement-predictions",
        type=Path,
        nargs="*",
        default=[],
        help="each refiner's predictions parquet, in --refiners order",
    )
    parser.add_argument(
        "--refinements", type=Path, nargs="*", default=[], help="each refiner's executions parquet, in --refiners order"
    )
    parser.add_argument(
        "--adapters",
        nargs="*",
        default=[],
        metavar="NAME=FOLDER",
        help="the adapter folder of each refiner that has one: runs.md's adapter column (none: the base model)",
    )
    parser.add_argument("--training-metrics", type=Path, help="training metrics parquet (TRAINING_METRICS_SCHEMA)")
    parser.add_argument(
        "--dropped-refinement-prompts",
        type=Path,
        help="refinement prompts refine-prompts dropped as too long (REFINEMENT_SCHEMA): "
        "counted per run in runs.md (without it the count is unknown, '-')",
    )
    parser.add_argument(
        "--execution-rules",
        choices=("strict", "published"),
        help="the execution rules of the evaluation runs, named beside the published numbers",
    )
    parser.add_argument("--output-dir", type=Path, required=True, help="folder for the tables and figures")
    add_config_argument(parser)


def read_training_metrics(path: Path | None) -> pl.DataFrame:
    """The training log, or an empty frame (the figure then says that nothing was logged)."""
    if path is None:
        return pl.DataFrame(schema={"step": pl.Int64, "name": pl.String, "value": pl.Float64})
    return read_frame(path, TRAINING_METRICS_SCHEMA)


def check_inputs(args: argparse.Namespace, tasks: dict[str, Task], baseline: pl.DataFrame) -> None:
    if not (len(args.refiners) == len(args.refinements) == len(args.refinement_predictions)):
        raise PipelineError(
            f"--refiners ({len(args.refiners)}), --refinement-predictions "
            f"({len(args.refinement_predictions)}) and --refinements ({len(args.refinements)}) "
            "must be given once per refiner, in the same order"
        )
    malformed = [pair for pair in args.adapters if "=" not in pair or pair.split("=", 1)[0] not in args.refiners]
    if malformed:
        raise PipelineError(f"--adapters: {malformed} are not NAME=FOLDER pairs of --refiners names")
    unknown = set(baseline["task_id"].unique().to_list()) - set(tasks)
    if unknown:
        raise InputFileError(f"{args.baseline}: tasks not in {args.tasks}: {sorted(unknown)[:5]}")


def evaluate(args: argparse.Namespace, config: EvaluateConfig) -> dict[str, Path]:
    """Everything the stage writes; returns the paths by file name."""
    out: Path = args.output_dir
    tasks = read_tasks_by_id([args.tasks])
    baseline = read_frame(args.baseline, EXECUTIONS_SCHEMA)
    check_inputs(args, tasks, baseline)
    baseline_predictions = read_frame(args.baseline_predictions, PREDICTIONS_SCHEMA)
    refinements = {name: read_frame(path, EXECUTIONS_SCHEMA) for name, path in zip(args.refiners, args.refinements)}
    refinement_predictions = {
        name: read_frame(path, PREDICTIONS_SCHEMA) for name, path in zip(args.refiners, args.refinement_predictions)
    }
    # Only tasks that were predicted count (a config may evaluate a subset of the tasks file).
    predicted = set(baseline["task_id"].unique().to_list())
    evaluated = {task_id: task for task_id, task in tasks.items() if task_id in predicted}
    test_known = {task_id: all(g is not None for g in task.test_outputs) for task_id, task in evaluated.items()}
    adapters = dict(pair.split("=", 1) for pair in args.adapters)
    runs = build_runs(
        baseline_predictions, baseline, refinements, config.first_predictions, refinement_predictions, adapters
    )

    # the results table, per-task tables and the published comparison
    metrics = run_task_metrics(runs, test_known)
    dropped = None
    if args.dropped_refinement_prompts is not None:
        dropped = read_frame(args.dropped_refinement_prompts, REFINEMENT_SCHEMA).height
        if dropped:
            log.warning(
                "%d refinement prompts were dropped as too long for the refinement context "
                "(evaluate.refinement_max_model_len): see 'dropped prompts' in runs.md",
                dropped,
            )
    results = with_dropped_prompts(results_table(runs, metrics), dropped)
    write_table(results, out / "runs.parquet", RUNS_SCHEMA)
    runs_md = to_markdown(seeds_table(results))
    write_text(with_legend(runs_md) + "\n" + DROPPED_LEGEND + "\n", out / "runs.md")
    note = (
        f"{len(evaluated)} evaluation tasks. Baseline: {runs[0].initial} predictions per task; refinement "
        f"runs: the first {config.first_predictions} plus the refiner's refinements of their wrong answers. "
        "MEAN over tasks; solved = one prediction right on train and test; dropped prompts = refinement "
        f"prompts too long for the refinement context, never sampled. {METRICS_LEGEND}"
    )
    write_text(page("Evaluation runs", [("", note, runs_md)]), out / "runs.html")
    # tasks only (task_metrics has no MEAN row; runs.parquet holds the means)
    per_task = pl.concat(
        [frame.select(pl.lit(name).alias("run"), pl.all()) for name, frame in metrics.items()], how="vertical"
    )
    write_table(per_task, out / "tasks.parquet", RUN_TASK_METRICS_SCHEMA)
    tasks_md = to_markdown(solved_by_run(per_task))
    write_text(tasks_md, out / "tasks.md")
    write_text(
        page(
            "Tasks x runs",
            [
                (
                    "",
                    (
                        "Per evaluation task and run: 'solved' = one prediction right on train and "
                        "test; otherwise the mean test pixel score ('?' = test solution unknown)."
                    ),
                    tasks_md,
                )
            ],
        ),
        out / "tasks.html",
    )
    if config.compare_with_published:
        if args.execution_rules is None:
            raise PipelineError("compare_with_published needs --execution-rules (the rules the runs used)")
        published_md = to_markdown(comparison_table(results, args.execution_rules))
        write_text(published_md, out / "published.md")
        write_text(
            page(
                "This run beside the published results",
                [
                    (
                        "",
                        (
                            "Published: ARC-AGI-1 evaluation, 400 tasks (docs/defaults.md), "
                            "executed under the researchers' rules ('published'); this run's rules are in the "
                            "'execution rules' column (docs/reproduction.md)."
                        ),
                        published_md,
                    )
                ],
            ),
            out / "published.html",
        )

    # Kaggle scoring per run, and the best run's submission
    kaggle = [analysis.kaggle_result(run, evaluated) for run in runs]
    best = analysis.best_kaggle(kaggle, results)
    kaggle_frame = analysis.kaggle_table(kaggle, best)
    write_table(kaggle_frame, out / "kaggle.parquet", RUN_KAGGLE_SCHEMA)
    validate_submission(best.submission, evaluated)
    write_submission(best.submission, out / "submission.json")
    validate_submission(read_submission(out / "submission.json"), evaluated)
    log.info(
        "submission.json: run %s (%s), score %s",
        best.run.name,
        best.run.model,
        "unknown" if best.score is None else f"{best.score:.1%}",
    )
    kaggle_md = to_markdown(kaggle_frame.drop("run"))
    write_text(kaggle_md, out / "kaggle.md")
    write_text(
        page(
            "Kaggle scoring",
            [
                (
                    "",
                    (
                        "Two attempts per test input: majority vote among the predictions that solve every train "
                        "pair, then among the rest. score = mean over tasks of the share of test inputs with a right "
                        f"attempt. submission.json holds the best run ({best.run.model})."
                    ),
                    kaggle_md,
                )
            ],
        ),
        out / "kaggle.html",
    )

    # error analysis
    errors = analysis.runs_errors(runs)
    write_table(errors, out / "errors.parquet", RUN_ERRORS_SCHEMA)
    shares_md = to_markdown(analysis.errors_wide(errors))
    sections = [("Share of predictions per error type (mean over tasks)", "", shares_md)]
    for run in runs:
        sections.append(
            (
                f"Most common errors: {run.model} ({run.name})",
                "",
                to_markdown(common_errors(run.executions, top=COMMON_ERRORS_PER_RUN)),
            )
        )
    write_text("\n".join(f"## {heading}\n\n{table}" for heading, _, table in sections), out / "errors.md")
    write_text(page("Error analysis", sections), out / "errors.html")
    plots.plot_errors(errors, out / "errors.png")

    # pass@k and training curves
    curves = analysis.runs_pass_at_k(runs, test_known, PASS_AT_K_SUCCESS)
    write_table(curves, out / "passk.parquet", RUN_PASS_AT_K_SCHEMA)
    plots.plot_pass_at_k(curves, out / "passk.png", PASS_AT_K_SUCCESS)
    plots.plot_training(read_training_metrics(args.training_metrics), out / "training.png")
    plots.plot_examples(
        [(f"{run.model} ({run.name})", run.executions) for run in runs], evaluated, test_known, out / "examples.png"
    )

    for line in runs_md.splitlines():
        log.info("%s", line)
    return {name: out / name for name in OUTPUT_FILES + (PUBLISHED_FILES if config.compare_with_published else ())}


def run(args: argparse.Namespace) -> int:
    config = parse_config(args, EvaluateConfig)
    try:
        evaluate(args, config)
    except ValueError as error:  # inputs that do not fit together (runs, submission): the message says which
        raise PipelineError(str(error)) from None
    return 0
