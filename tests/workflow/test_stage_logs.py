"""A failing stage leaves its cause (the error and its traceback) in the rule's own log file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from arc_pipeline.io import write_table
from arc_pipeline.schemas import TASKS_SCHEMA
from tests.workflow.conftest import Workflow


def test_missing_local_barc_file_is_named_in_the_stage_log(workflow: Workflow) -> None:
    result = workflow.snakemake(
        "--config",
        "barc={download: {source: local, local_path: /nope.jsonl}}",
        "--until",
        "barc_tasks",
        check=False,
        timeout=600,
    )
    assert result.returncode != 0
    log = workflow.path("logs/barc_download.log").read_text()
    assert "/nope.jsonl" in log and "barc.download.local_path" in log and "arc-pipeline barc-download: " in log


def test_uncaught_error_and_library_output_reach_the_log(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "stage.log"
    # An output folder that is a file: the stage fails inside pathlib, not with a PipelineError of ours.
    tasks = write_table([], tmp_path / "tasks.parquet", TASKS_SCHEMA)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "arc_pipeline.cli",
            "--log-file",
            str(log_file),
            "shard",
            "--tasks",
            str(tasks),
            "--index",
            "0",
            "--count",
            "1",
            "--output",
            str(tasks / "out.parquet"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    log = log_file.read_text()
    assert "shard failed" in log and "Traceback (most recent call last)" in log
    assert "tasks.parquet" in log
    # the terminal still shows it (Snakemake prints a failed job's output), once, not twice
    assert result.stderr.count("shard failed") == 1


def test_warnings_and_child_process_output_reach_the_log(tmp_path: Path) -> None:
    """What a library's subprocess (vLLM's engine core) writes to the inherited descriptors is kept."""
    log_file = tmp_path / "stage.log"
    script = (
        "import subprocess, sys, warnings\n"
        "from arc_pipeline.logging_setup import output_to_log, setup_logging\n"
        f"with output_to_log({str(log_file)!r}):\n"
        "    setup_logging()\n"
        "    warnings.warn('a library warning')\n"
        "    subprocess.run([sys.executable, '-c', 'print(\"child stdout\"); import sys; "
        'print("child stderr", file=sys.stderr)\'], check=True)\n'
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=120)
    log = log_file.read_text()
    assert "a library warning" in log and "child stdout" in log and "child stderr" in log
