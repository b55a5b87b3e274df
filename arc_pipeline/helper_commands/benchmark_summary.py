"""``arc-pipeline benchmark-summary``: time and memory of every job of a run, per rule and per job.

Every rule writes Snakemake's own measurement of its job to ``results/benchmarks/<rule>[/<job>].tsv``
(``benchmark:``, ``rules/common.smk``): wall-clock seconds (``s``), the peak resident memory of the job's
whole process tree in MB (``max_rss``, vLLM's engine process included) and its CPU seconds (``cpu_time``);
``NA`` where the job ended before the first sample. GPU jobs add ``<same name>.gpu.json``
(arc_pipeline/gpu_memory.py): the peak memory used on the job's GPUs, null on a machine without GPUs.

Benchmark files exist only once their jobs have run, so the rule running this command depends on the
workflow's final outputs and reads the folder at run time: it sees every job of the DAG that has run in this
results folder, including jobs of earlier runs whose files are still there (each row says when it was measured).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from arc_pipeline.evaluation.html import page
from arc_pipeline.io import InputFileError, write_text

log = logging.getLogger(__name__)

GPU_SUFFIX = ".gpu.json"
NOTE = (
    "Snakemake's benchmark of each job (results/benchmarks/): wall-clock time, CPU time and peak resident memory "
    "of the job's processes (max RSS, child processes included); GPU peak = the largest memory used on the job's "
    "GPUs in a sample of nvidia-smi every second ('-': no GPU measured, e.g. a CPU run). Jobs of about a second "
    "are sampled once or not at all: their RSS is a lower bound or '-'. Per rule: jobs, summed and largest wall "
    "time, summed CPU time, the largest RSS and GPU peak of its jobs."
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmarks", type=Path, required=True, help="the benchmark folder (results/benchmarks)")
    parser.add_argument("--output-md", type=Path, required=True, help="the tables as markdown")
    parser.add_argument("--output-html", type=Path, required=True, help="the same tables as a page for the report")
    parser.add_argument("--exclude", type=Path, nargs="*", default=[], help="benchmark files to leave out")


def _number(value: object) -> float | None:
    """A benchmark cell as a float; Snakemake writes NA for 'not measured'."""
    if value is None or value == "NA":
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _gpu_peak(tsv: Path) -> float | None:
    sidecar = tsv.with_name(tsv.name.removesuffix(".tsv") + GPU_SUFFIX)
    if not sidecar.exists():
        return None
    try:
        peak = json.loads(sidecar.read_text()).get("peak_used_mib")
    except (OSError, ValueError, AttributeError) as error:
        log.warning("unreadable GPU memory record %s: %s", sidecar, error)
        return None
    return None if peak is None else float(peak)


def read_jobs(folder: Path, exclude: set[Path] = frozenset()) -> pl.DataFrame:
    """One row per benchmark file under ``folder``: rule, job (its wildcards' path), and the measurements."""
    rows = []
    for tsv in sorted(folder.rglob("*.tsv")):
        if tsv.resolve() in exclude:
            continue
        parts = tsv.relative_to(folder).with_suffix("").parts
        table = pl.read_csv(tsv, separator="\t", infer_schema=False)
        if table.height == 0 or not {"s", "max_rss", "cpu_time"} <= set(table.columns):
            raise InputFileError(f"{tsv} is not a Snakemake benchmark file (columns s, max_rss, cpu_time)")
        first = table.row(0, named=True)  # one repeat per job (no benchmark repeats in this workflow)
        rows.append(
            {
                "rule": parts[0],
                "job": "/".join(parts[1:]),
                "wall_s": _number(first["s"]),
                "cpu_s": _number(first["cpu_time"]),
                "max_rss_mb": _number(first["max_rss"]),
                "gpu_peak_mib": _gpu_peak(tsv),
                "measured": datetime.fromtimestamp(tsv.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
    schema = {
        "rule": pl.String,
        "job": pl.String,
        "wall_s": pl.Float64,
        "cpu_s": pl.Float64,
        "max_rss_mb": pl.Float64,
        "gpu_peak_mib": pl.Float64,
        "measured": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def per_rule(jobs: pl.DataFrame) -> pl.DataFrame:
    """One row per rule, in the order the rules' first jobs were measured (roughly the DAG's order)."""
    return (
        jobs.sort("measured", "rule", "job")
        .group_by("rule", maintain_order=True)
        .agg(
            pl.len().alias("jobs"),
            pl.col("wall_s").sum().alias("wall_s_total"),
            pl.col("wall_s").max().alias("wall_s_max"),
            # null, not 0, when no job of the rule was sampled
            pl.when(pl.col("cpu_s").is_not_null().any()).then(pl.col("cpu_s").sum()).alias("cpu_s_total"),
            pl.col("max_rss_mb").max().alias("max_rss_mb"),
            pl.col("gpu_peak_mib").max().alias("gpu_peak_mib"),
        )
    )


HEADERS = {
    "rule": "rule",
    "job": "job",
    "jobs": "jobs",
    "wall_s": "wall time (s)",
    "wall_s_total": "wall time, all jobs (s)",
    "wall_s_max": "longest job (s)",
    "cpu_s": "CPU time (s)",
    "cpu_s_total": "CPU time, all jobs (s)",
    "max_rss_mb": "max RSS (MB)",
    "gpu_peak_mib": "GPU peak (MiB)",
    "measured": "measured (UTC)",
}


def _cell(value: object, column: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if column in ("max_rss_mb", "gpu_peak_mib") else f"{value:.1f}"
    return str(value).replace("|", "\\|")


def markdown(table: pl.DataFrame) -> str:
    lines = ["| " + " | ".join(HEADERS[c] for c in table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(_cell(row[c], c) for c in table.columns) + " |" for row in table.iter_rows(named=True)]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if not args.benchmarks.is_dir():
        raise InputFileError(f"benchmark folder {args.benchmarks} not found: run the workflow's jobs first")
    jobs = read_jobs(args.benchmarks, {path.resolve() for path in args.exclude})
    rules = per_rule(jobs)
    jobs_md, rules_md = markdown(jobs.sort("rule", "job")), markdown(rules)
    write_text(f"# Time and memory per rule\n\n{NOTE}\n\n{rules_md}\n## Per job\n\n{jobs_md}", args.output_md)
    sections = [("Per rule", NOTE, rules_md), ("Per job", "", jobs_md)]
    write_text(page("Time and memory per rule", sections), args.output_html)
    log.info("benchmarks of %d jobs of %d rules summarised", jobs.height, rules.height)
    return 0
