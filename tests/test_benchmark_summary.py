"""`arc-pipeline benchmark-summary` on benchmark files as Snakemake writes them (tab-separated, NA where a job
ended before the first sample) and GPU records beside them; and the rules that write those files."""

from __future__ import annotations

import os

os.environ["CONDOR_CONFIG"] = os.devnull  # tests.test_profiles imports htcondor2: never reach a real pool

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_profiles import GPU_RULES, _dry_run_in_process, workdir  # noqa: F401

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _benchmark(folder: Path, relative: str, seconds: float, rss: str, cpu: str) -> Path:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:01\t{rss}\t1\t1\t1\t0\t0\t50\t{cpu}\n")
    return path


def test_per_rule_and_per_job_tables(tmp_path: Path) -> None:
    folder = tmp_path / "benchmarks"
    _benchmark(folder, "inference/part1/shard0.tsv", 100.0, "2500.5", "180.0")
    shard1 = _benchmark(folder, "inference/part2/shard0.tsv", 50.0, "3000.2", "90.0")
    shard1.with_name("shard0.gpu.json").write_text(json.dumps({"peak_used_mib": 71000}))
    _benchmark(folder, "barc_tasks.tsv", 0.3, "NA", "NA")  # faster than Snakemake's first sample
    own = _benchmark(folder, "benchmark_summary.tsv", 1.0, "10", "1")
    md, page = tmp_path / "summary.md", tmp_path / "summary.html"
    done = subprocess.run(
        [sys.executable, "-m", "arc_pipeline.cli", "benchmark-summary", "--benchmarks", str(folder)]
        + ["--exclude", str(own), "--output-md", str(md), "--output-html", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rules_part, jobs_part = md.read_text().split("## Per job")
    assert "| inference | 2 | 150.0 | 100.0 | 270.0 | 3000 | 71000 |" in rules_part
    assert "| barc_tasks | 1 | 0.3 | 0.3 | - | - | - |" in rules_part  # not sampled: no CPU time, not 0
    assert "benchmark_summary" not in md.read_text()
    assert "| inference | part2/shard0 | 50.0 | 90.0 | 3000 | 71000 |" in jobs_part
    assert "| inference | part1/shard0 | 100.0 | 180.0 | 2500 | - |" in jobs_part
    html = page.read_text()
    assert html.count("<tr>") == 2 + 2 + 3 and "71000" in html


def test_no_benchmark_folder_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "arc_pipeline.cli", "benchmark-summary", "--benchmarks", str(tmp_path / "none")]
        + ["--output-md", str(tmp_path / "a.md"), "--output-html", str(tmp_path / "a.html")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("arc-pipeline benchmark-summary: benchmark folder")


def test_every_rule_has_a_benchmark_named_after_it(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """results/benchmarks/<rule>[/<wildcards>].tsv for every rule that runs a job (not `all`); GPU rules also
    pass the GPU record beside it to their command."""
    workflow, _ = _dry_run_in_process(["--profile", "condor"], monkeypatch)
    rules = [rule for rule in workflow.rules if rule.name != "all"]
    assert len(rules) >= 19
    for rule in rules:
        assert rule.benchmark is not None, f"rule {rule.name} has no benchmark:"
        assert re.fullmatch(rf"results/benchmarks/{rule.name}(/.+)?\.tsv", str(rule.benchmark)), rule.benchmark
    for job in workflow.dag.jobs:
        if job.rule.name in GPU_RULES:
            command = job.format_wildcards(job.rule.shellcmd)
            expected = str(job.benchmark).removesuffix(".tsv") + ".gpu.json"
            assert f"--gpu-memory-file {expected} " in command, command
