"""The whole workflow on the embedded default config (real vLLM on CPU, real TRL), as `make run` runs it.

From an empty results folder, with the profile README command 1 uses: every job of the DAG, the
evaluation with the trained LoRA adapter included, then the HTML report. A tiny model writes little
valid code; this test asserts the pipeline's shape and accounting: every task has its predictions, every
prediction has an execution row with scores or an error type, every output of the DAG exists and is
consistent with what it was built from.
"""

from __future__ import annotations

import json
import os
import shutil

import polars as pl
import pytest

from arc_pipeline.generation.compile_cache import CACHE_VARIABLES
from tests.test_profiles import GPU_RULES
from tests.workflow.conftest import Workflow

pytestmark = pytest.mark.slow


def test_barc_parts_have_their_tasks(finished: Workflow) -> None:
    split = finished.config["barc"]["split"]
    ids = []
    for part in range(1, split["n_parts"] + 1):
        frame = pl.read_parquet(finished.path(f"barc_split/part{part}.parquet"))
        assert frame.height == split["tasks_per_part"]
        ids += frame["task_id"].to_list()
    assert len(set(ids)) == len(ids)
    summary = json.loads(finished.path("barc_tasks/tasks.summary.json").read_text())
    assert summary["tasks"] + sum(summary["skipped"].values()) == summary["rows"]


def test_every_task_has_its_predictions_and_every_prediction_an_execution(finished: Workflow) -> None:
    inference = finished.config["inference"]
    for part in range(1, finished.config["barc"]["split"]["n_parts"] + 1):
        tasks = pl.read_parquet(finished.path(f"barc_split/part{part}.parquet"))
        predictions = pl.read_parquet(finished.path(f"inference/barc/part{part}.parquet"))
        per_task = predictions.group_by("task_id").len()
        assert set(per_task["task_id"]) == set(tasks["task_id"])
        assert per_task["len"].to_list() == [inference["n_predictions"]] * tasks.height
        assert predictions["prediction_id"].n_unique() == predictions.height
        assert set(predictions["round"].unique()) == set(range(inference["n_predictions"] // inference["n"]))

        executions = pl.read_parquet(finished.path(f"execute/barc/part{part}.parquet"))
        assert sorted(executions["prediction_id"]) == sorted(predictions["prediction_id"])
        scored = executions["train_pixel_score"].is_not_null()
        failed = executions["error_type"].is_not_null()
        assert (scored ^ failed).all(), "each execution has either scores or an error type"

        metrics = finished.path(f"execute/barc/part{part}.metrics.md").read_text()
        assert "MEAN" in metrics and "valid code" in metrics


def test_refinement_training_and_evaluation_outputs(finished: Workflow) -> None:
    refinement = pl.read_parquet(finished.path("refine_dataset/refinement.parquet"))
    assert refinement["task_id"].n_unique() == refinement.height
    adapter = finished.path("train/adapter")
    assert (adapter / "adapter_config.json").exists()
    metrics = pl.read_parquet(finished.path("train/metrics.parquet"))
    assert metrics.height >= 1
    runs = finished.path("evaluate/report/runs.md").read_text()
    assert "base" in runs and "MEAN" not in runs.splitlines()[0]
    submission = json.loads(finished.path("evaluate/report/submission.json").read_text())
    tasks = pl.read_parquet(finished.path("arc_tasks/tasks.parquet"))
    assert set(submission) == set(tasks["task_id"])


def test_every_output_of_the_dag_exists(finished: Workflow) -> None:
    summary = finished.snakemake("--summary").stdout.splitlines()
    header = summary[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in summary[1:] if line.strip()]
    assert len(rows) > 20
    missing = [row["output_file"] for row in rows if row["status"] == "missing"]
    assert missing == [], f"outputs not made: {missing}"


def test_the_trained_adapter_was_evaluated_through_vllm(finished: Workflow) -> None:
    """The job that stalled on AVX2-only CPUs: refinements sampled with the RL adapter."""
    predictions = pl.read_parquet(finished.path("evaluate/refine_rl/predictions.parquet"))
    prompts = pl.read_parquet(finished.path("evaluate/refine_prompts.parquet"))
    assert predictions.height == prompts.height * finished.config["inference"]["n"] > 0
    assert predictions["adapter"].unique().to_list() == [finished.target("train/adapter")]
    assert set(predictions["turn"]) == {2}


def test_the_report_builds_from_the_finished_run(finished: Workflow) -> None:
    report = finished.workdir / "report.html"
    finished.snakemake("--report", str(report))
    html = report.read_text()
    assert "runs.md" in html and len(html) > 100_000
    assert "summary.html" in html and "Time and memory" in html  # the per-rule table (rules/benchmarks.smk)


def test_every_job_is_benchmarked_and_tabled_for_the_report(finished: Workflow) -> None:
    """Each job's `benchmark:` file exists (one per job of the DAG), GPU jobs add their GPU record (null peaks
    on this CPU machine), and the summary holds one row per rule with its job count and measurements."""
    planned = finished.planned_jobs("--forceall")
    assert finished.benchmarked_jobs() == {rule: n for rule, n in planned.items() if rule != "all"}
    gpu_records = sorted(finished.path("benchmarks").rglob("*.gpu.json"))
    assert len(gpu_records) == sum(planned[rule] for rule in GPU_RULES)
    for path in gpu_records:
        record = json.loads(path.read_text())
        assert record["command"] in ("inference", "train") and record["seconds"] > 0
        if shutil.which("nvidia-smi") is None:
            assert record["peak_used_mib"] is None and "nvidia-smi not found" in record["note"]

    summary = finished.path("benchmarks/summary.md").read_text()
    per_rule = summary.split("## Per job")[0]
    rows = [line.split("|")[1:-1] for line in per_rule.splitlines() if line.startswith("| ")][1:]
    table = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}
    assert set(table) == set(planned) - {"all", "benchmark_summary"}
    for rule, (jobs, wall_total, _longest, _cpu, _rss, gpu) in table.items():
        assert int(jobs) == planned[rule], rule
        assert float(wall_total) > 0, rule
        assert gpu == "-" or rule in GPU_RULES
    # vLLM's engine runs in a child process: the job's max RSS counts it (a tiny model still needs > 500 MB)
    assert float(table["inference"][4]) > 500
    assert (
        finished.path("benchmarks/summary.html").read_text().count("<tr>")
        == len(table) + sum(planned[rule] for rule in table) + 2
    )  # the header rows of both tables


def test_gpu_jobs_share_the_runs_compile_cache(finished: Workflow) -> None:
    """Every inference and train job keeps its vLLM, Inductor and Triton caches in <results>/compile-cache, so
    that later engine starts (and jobs on other nodes, with cluster.compile_cache_dir) start warm."""
    # a cache folder set in the environment wins (generation/compile_cache.py), as on a cluster with its own
    ours = {variable: sub for variable, sub in CACHE_VARIABLES.items() if variable not in os.environ}
    if not ours:
        pytest.skip(f"{', '.join(CACHE_VARIABLES)} are all set in this environment: the run uses those")
    planned = finished.planned_jobs("--forceall")
    cache = finished.path("compile-cache").absolute()
    logs = [path for path in finished.path("logs").rglob("*.log") if "compile cache: " in path.read_text()]
    assert len(logs) == sum(planned[rule] for rule in GPU_RULES)
    for path in logs:
        named = {
            line.split("compile cache: ")[1] for line in path.read_text().splitlines() if "compile cache: " in line
        }
        assert named == {f"{variable}={cache / sub}" for variable, sub in ours.items()}, path
    assert sorted(child.name for child in cache.iterdir()) == sorted(ours.values())


def test_second_run_has_nothing_to_do(finished: Workflow) -> None:
    assert finished.planned_jobs() == {}
