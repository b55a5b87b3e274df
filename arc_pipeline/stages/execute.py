"""Stage ``execute``: run every predicted program in the sandbox, score it, and tabulate the run.

Writes the executions parquet (``EXECUTIONS_SCHEMA``; chunked and resumable, see
:mod:`arc_pipeline.scoring.resumable`), the per-task metric table (``METRICS_SCHEMA``: tasks only; the
markdown adds their ``MEAN`` as its last row) and the per-task error table, each as parquet and markdown
(docs/scoring.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Literal

import polars as pl
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

from arc_pipeline.config.slices import add_config_argument, parse_config
from arc_pipeline.domain.tasks import Task
from arc_pipeline.evaluation.html import page
from arc_pipeline.io import InputFileError, read_frame, write_table, write_text
from arc_pipeline.sandbox import SandboxConfig
from arc_pipeline.schemas import METRICS_SCHEMA, PREDICTIONS_SCHEMA, errors_schema
from arc_pipeline.scoring.execution import NEEDED_COLUMNS, check_predictions
from arc_pipeline.scoring.legend import METRICS_LEGEND, with_legend
from arc_pipeline.scoring.resumable import execute_resumable
from arc_pipeline.scoring.rules import max_output_side
from arc_pipeline.scoring.tables import (
    EXECUTION_COLUMNS,
    common_errors,
    error_table,
    errors_markdown,
    task_means,
    task_metrics,
    to_markdown,
    with_mean_row,
)
from arc_pipeline.task_files import read_tasks_by_id

log = logging.getLogger(__name__)


class ExecuteConfig(BaseModel):
    """Sandbox limits and scoring of one execute job (docs/sandbox.md, docs/scoring.md)."""

    model_config = ConfigDict(extra="forbid")

    workers: PositiveInt | None = Field(
        None,
        description="sandbox worker processes; None = the job's threads (--threads: the workflow passes "
        "cluster.cpu.threads), or the CPUs this process may use when run without --threads",
    )
    timeout_s: PositiveFloat = Field(
        1.0, description="time limit of one program on all its inputs (published run: 1 s)"
    )
    memory_mb: int = Field(2048, ge=64, description="memory limit of one program in MiB (published run: 2048)")
    chunk_size: PositiveInt = Field(2000, description="predictions per resumable chunk")
    scoring_workers: NonNegativeInt | None = Field(
        None,
        description="processes scoring one chunk while the sandbox runs the next "
        "(default: a quarter of workers, at least 1; 0: in the main process)",
    )
    progress: bool = Field(True, description="show a progress bar per chunk")
    rules: Literal["strict", "published"] = Field(
        "strict",
        description="execution rules (arc_pipeline/scoring/rules.py): strict = the project's; "
        "published = the researchers' runner (see docs/reproduction.md)",
    )

    def worker_count(self, threads: int | None) -> int:
        """``workers`` if set, else the job's threads, else the CPUs this process may use."""
        return self.workers or threads or max(1, len(os.sched_getaffinity(0)))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--predictions", type=Path, required=True, help="predictions parquet (PREDICTIONS_SCHEMA)")
    parser.add_argument(
        "--tasks", type=Path, nargs="+", required=True, help="tasks parquet(s) (TASKS_SCHEMA), e.g. every BARC part"
    )
    parser.add_argument("--executions", type=Path, required=True, help="output: executions parquet")
    parser.add_argument("--metrics", type=Path, required=True, help="output: per-task metrics parquet")
    parser.add_argument("--metrics-md", type=Path, required=True, help="output: per-task metrics markdown")
    parser.add_argument(
        "--metrics-html",
        type=Path,
        help="output (optional): the per-task metrics markdown as an HTML page, which "
        "`snakemake --report` shows inline (markdown is only a download there)",
    )
    parser.add_argument("--title", default="Per-task metrics", help="title of the --metrics-html page")
    parser.add_argument("--errors", type=Path, required=True, help="output: per-task error shares parquet")
    parser.add_argument("--errors-md", type=Path, required=True, help="output: error tables markdown")
    parser.add_argument(
        "--threads", type=int, help="CPUs this job may use (Snakemake's threads): the default number of sandbox workers"
    )
    add_config_argument(parser)


def _read_inputs(args: argparse.Namespace) -> tuple[pl.DataFrame, dict[str, Task]]:
    columns = pa.schema([PREDICTIONS_SCHEMA.field(name) for name in NEEDED_COLUMNS])
    try:
        predictions = read_frame(args.predictions, columns)
        tasks = read_tasks_by_id(args.tasks)
        check_predictions(predictions, tasks, source=str(args.predictions))
    except ValueError as error:  # check_predictions' message names the predictions file
        raise InputFileError(str(error)) from None
    return predictions, tasks


def run(args: argparse.Namespace) -> None:
    config = parse_config(args, ExecuteConfig)
    started = time.monotonic()
    predictions, tasks = _read_inputs(args)
    workers = config.worker_count(args.threads)
    sandbox_config = SandboxConfig(
        workers=workers,
        timeout_s=config.timeout_s,
        memory_mb=config.memory_mb,
        max_output_side=max_output_side(config.rules),
    )
    log.info(
        "executing %d predictions of %d tasks with %d workers (timeout %.1f s, memory %d MiB, %s rules)",
        predictions.height,
        predictions["task_id"].n_unique(),
        workers,
        config.timeout_s,
        config.memory_mb,
        config.rules,
    )
    scoring_workers = max(1, workers // 4) if config.scoring_workers is None else config.scoring_workers
    execute_resumable(
        predictions,
        tasks,
        sandbox_config,
        args.executions,
        chunk_size=config.chunk_size,
        progress=config.progress,
        source=str(args.predictions),
        scoring_workers=scoring_workers,
        rules=config.rules,
    )

    executions = pl.read_parquet(args.executions, columns=list(EXECUTION_COLUMNS))
    task_ids = executions["task_id"].unique().to_list()
    if len(task_ids) < len(tasks):
        log.warning(
            "%d of the %d tasks in %s have no predictions: the tables leave them out",
            len(tasks) - len(task_ids),
            len(tasks),
            ", ".join(str(path) for path in args.tasks),
        )
    test_known = {task_id: all(grid is not None for grid in tasks[task_id].test_outputs) for task_id in task_ids}
    metrics = task_metrics(executions, test_known)
    write_table(metrics, args.metrics, METRICS_SCHEMA)
    metrics_md = to_markdown(with_mean_row(metrics))
    write_text(with_legend(metrics_md), args.metrics_md)
    if args.metrics_html is not None:
        note = (
            f"{metrics.height} tasks, {executions.height} predictions; one row per task, then their MEAN. "
            + METRICS_LEGEND
        )
        write_text(page(args.title, [("", note, metrics_md)]), args.metrics_html)
    errors = error_table(executions)
    write_table(errors, args.errors, errors_schema(errors.columns[2:]))
    write_text(errors_markdown(errors, common_errors(executions)), args.errors_md)

    means = task_means(metrics) if metrics.height else {}

    def pct(name: str) -> str:
        value = means.get(name)
        return "-" if value is None else f"{value:.1%}"

    log.info(
        "executed %d predictions of %d tasks in %.0f s: valid code %s, valid outputs %s, "
        "train_is_correct %s, test_is_correct %s, is_correct %s, solved %s",
        executions.height,
        len(task_ids),
        time.monotonic() - started,
        pct("valid code"),
        pct("valid outputs"),
        pct("train_is_correct"),
        pct("test_is_correct"),
        pct("is_correct"),
        pct("solved"),
    )
