"""Fault injection on a copy of a finished workflow run: stop one job's command (SIGKILL at a random
moment, or SIGTERM), check what it left, rerun with Snakemake, compare with the finished run.

Shared by tests/workflow/test_kill_and_rerun.py and benchmarks/fault_injection.py. The job's command is
the one Snakemake ran (``snakemake --detailed-summary``), started in the copy as Snakemake starts it,
after deleting the job's outputs as Snakemake does before a job. Outputs are compared as data: parquet
tables as tables, JSON as JSON; what differs between any two uninterrupted runs is left out and named
in VOLATILE (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import psutil

from arc_pipeline.training.phases import MEMORY_METRIC_PREFIX, PHASE_METRIC_PREFIX
from tests.workflow.conftest import Workflow

#: What differs between any two uninterrupted runs, and why; left out of the comparison.
VOLATILE = {
    "duration_s": "column of executions: each program's wall-clock time",
    "step_time": "training metric: the step's wall-clock time",
    "time/*, memory/*": "training metrics of the step breakdown (arc_pipeline/training/phases.py): seconds per "
    "phase and memory peaks",
    "train_runtime, train_*_per_second, train_loss, total_flos": "training metrics of the trainer's end-of-run "
    "summary, about the steps this process ran (none when a rerun finds the last checkpoint already saved)",
    "resumed_from, kept_checkpoint": "fields of training_summary.json: which checkpoint this process resumed "
    "from or copied the adapter of",
    "training_args.bin": "the trainer's pickled arguments: they name the run's TensorBoard folder, a timestamp",
    "target_modules": "field of adapter_config.json: peft writes it from a set, in string-hash order",
}
#: Training metrics (regular expression over their names) that two runs of the same steps need not share.
NOT_COMPARED_METRICS = (
    f"step_time|train_runtime|per_second|train_loss|total_flos|^{PHASE_METRIC_PREFIX}|^{MEMORY_METRIC_PREFIX}"
)
_DEBRIS = re.compile(r"\..+\.([a-z0-9_]{8}\.tmp|old-\d+)|.+\.partial")  # io.remove_leftovers, execute's chunks


@dataclass(frozen=True)
class Job:
    """One job of the finished run: its rule, its outputs (as Snakemake names them) and its command."""

    rule: str
    outputs: tuple[str, ...]
    command: str


def finished_jobs(workflow: Workflow) -> dict[str, Job]:
    """The first job of every rule that ran, from ``snakemake --detailed-summary``."""
    lines = workflow.snakemake("--detailed-summary").stdout.splitlines()
    header = lines[0].split("\t")
    by_command: dict[tuple[str, str], list[str]] = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split("\t")))
        if row.get("shellcmd") and row["status"] == "ok":
            by_command.setdefault((row["rule"], row["shellcmd"]), []).append(row["output_file"])
    jobs: dict[str, Job] = {}
    for (rule, command), outputs in sorted(by_command.items()):
        jobs.setdefault(rule, Job(rule, tuple(sorted(outputs)), command))
    return jobs


# ------------------------------------------------------------------ comparing outputs


def _frame(path: Path) -> pl.DataFrame:
    frame = pl.read_parquet(path)
    frame = frame.drop([name for name in frame.columns if name == "duration_s"])
    if {"step", "name", "value"} <= set(frame.columns):  # training metrics (long format)
        frame = frame.filter(~pl.col("name").str.contains(NOT_COMPARED_METRICS))
    return frame


def _json(path: Path) -> object:
    value = json.loads(path.read_text())
    if isinstance(value, dict):
        value.pop("resumed_from", None)
        value.pop("kept_checkpoint", None)
        if isinstance(value.get("target_modules"), list):
            value["target_modules"] = sorted(value["target_modules"])
    return value


def file_difference(reference: Path, candidate: Path) -> str | None:
    """None when ``candidate`` holds what ``reference`` holds, else what differs."""
    if not candidate.is_file():
        return f"{candidate.name} missing"
    if reference.name == "training_args.bin":
        return None
    if reference.suffix == ".parquet":
        try:
            same = _frame(reference).equals(_frame(candidate), null_equal=True)
        except (OSError, pl.exceptions.PolarsError) as error:
            return f"{candidate.name} unreadable ({error})"
        return None if same else f"{candidate.name}: other data"
    if reference.suffix == ".json":
        try:
            return None if _json(reference) == _json(candidate) else f"{candidate.name}: other content"
        except ValueError:
            return f"{candidate.name}: not JSON"
    return None if reference.read_bytes() == candidate.read_bytes() else f"{candidate.name}: other bytes"


def output_differences(reference_root: Path, candidate_root: Path, outputs: tuple[str, ...]) -> list[str]:
    """What differs between the two runs' outputs (files, or every visible file of a folder output)."""
    found = []
    for output in outputs:
        reference, candidate = reference_root / output, candidate_root / output
        if reference.is_dir():
            names = {p.relative_to(reference) for p in reference.rglob("*") if p.is_file() and _visible(p)}
            if candidate.is_dir():
                extra = {p.relative_to(candidate) for p in candidate.rglob("*") if p.is_file() and _visible(p)}
                found += [f"{output}/{name}: unexpected" for name in sorted(extra - names)]
            pairs = [(reference / name, candidate / name, f"{output}/{name}") for name in sorted(names)]
        else:
            pairs = [(reference, candidate, output)]
        for ref, cand, label in pairs:
            problem = file_difference(ref, cand)
            if problem is not None:
                found.append(f"{label}: {problem}")
    return found


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")


def debris(root: Path) -> list[str]:
    """Leftovers of unfinished writes under ``root``: hidden temporary files or folders, execute's chunks."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if _DEBRIS.fullmatch(p.name))


# ------------------------------------------------------------------ one trial


@dataclass
class Trial:
    rule: str
    fault: str  # "SIGKILL", "SIGTERM", or "none" (a control run: the command runs to its end)
    delay_s: float
    after: str | None = None  # the delay counts from when this file exists (relative to the workdir)
    workdir: Path | None = None
    exit_status: int | None = None
    ran_s: float = 0.0  # how long the command ran
    hit: bool = False  # the signal reached the command while it ran
    outputs_at_stop: int = 0  # how many of the job's outputs existed when it stopped
    outputs: int = 0  # how many outputs the job has
    half_written: list[str] = field(default_factory=list)  # outputs present after the stop but not whole
    leftover_processes: int = 0
    rerun_jobs: str = ""
    differences: list[str] = field(default_factory=list)
    debris: list[str] = field(default_factory=list)
    stderr_tail: str = ""

    @property
    def survived(self) -> bool:
        return not (self.half_written or self.differences or self.debris or self.leftover_processes)


def prepare_copy(finished: Workflow, workdir: Path, job: Job) -> Workflow:
    """A copy of the finished run without the job's outputs (Snakemake deletes them before a job). For
    training also without its checkpoints, which would let the rerun skip training altogether."""
    shutil.copytree(finished.workdir, workdir, symlinks=True)
    copy = Workflow(workdir, finished.config)
    for output in job.outputs:
        path = workdir / output
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    if job.rule == "train":
        shutil.rmtree(copy.path("train/checkpoints"), ignore_errors=True)
    return copy


def _environment() -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def stop_job(copy: Workflow, job: Job, trial: Trial) -> None:
    """Start the job's command, send the trial's signal after its delay, wait for the command to end."""
    started = time.monotonic()
    # stderr to a file, not a pipe: a process the command left behind would hold a pipe open forever
    stderr_file = copy.workdir / "stopped-command.stderr"
    with stderr_file.open("w") as stderr:
        process = subprocess.Popen(
            ["bash", "-c", f"set -euo pipefail; exec {job.command}"],
            cwd=copy.workdir,
            env=_environment(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    children: list[psutil.Process] = []
    clock = None if trial.after else started
    while process.poll() is None and (clock is None or time.monotonic() - clock < trial.delay_s):
        if clock is None and (copy.workdir / trial.after).exists():
            clock = time.monotonic()
        try:
            children = psutil.Process(process.pid).children(recursive=True) or children
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    if process.poll() is None and trial.fault != "none":
        trial.hit = True
        process.send_signal(signal.Signals[trial.fault])
    process.wait(timeout=600)
    trial.ran_s = time.monotonic() - started
    trial.exit_status = process.returncode
    trial.stderr_tail = stderr_file.read_text()[-2000:]
    trial.outputs_at_stop = sum((copy.workdir / output).exists() for output in job.outputs)
    trial.outputs = len(job.outputs)
    _, alive = psutil.wait_procs(children, timeout=10)  # what the command started must end with it
    trial.leftover_processes = len(alive)
    for child in alive:
        child.kill()


def check_after_stop(finished: Workflow, copy: Workflow, job: Job, trial: Trial) -> None:
    """Every output the stopped command left is whole: the finished run's data, or, for training's live
    metrics (rewritten after every step), a readable table."""
    for output in job.outputs:
        path = copy.workdir / output
        if not path.exists():
            continue
        if job.rule == "train" and output.endswith("metrics.parquet"):
            try:
                pl.read_parquet(path)
            except (OSError, pl.exceptions.PolarsError) as error:
                trial.half_written.append(f"{output}: unreadable ({error})")
            continue
        trial.half_written += output_differences(finished.workdir, copy.workdir, (output,))


def run_trial(
    finished: Workflow, workdir: Path, job: Job, fault: str, delay_s: float, after: str | None = None
) -> Trial:
    """Copy, start the job, stop it, check, rerun the job's outputs with Snakemake, compare, look for debris."""
    trial = Trial(job.rule, fault, delay_s, after, workdir)
    copy = prepare_copy(finished, workdir, job)
    stop_job(copy, job, trial)
    check_after_stop(finished, copy, job, trial)
    planned = copy.planned_jobs(*job.outputs)
    trial.rerun_jobs = ", ".join(f"{rule} x{count}" for rule, count in sorted(planned.items())) or "none"
    copy.snakemake(*job.outputs)
    trial.differences = output_differences(finished.workdir, copy.workdir, job.outputs)
    trial.debris = debris(copy.workdir / copy.config["results_dir"])
    return trial
