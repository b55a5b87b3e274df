"""Fault injection on the CPU stages of the workflow: kill -9 at random moments, SIGTERM on training, a full
disk and damaged parquet files; prints one table row per trial (fault, stage, outcome, outputs identical).

    python benchmarks/fault_injection.py                       # runs the workflow once first (minutes)
    python benchmarks/fault_injection.py --finished /tmp/run   # reuse a finished run's working directory
    python benchmarks/fault_injection.py --kills 5 --seed 1 --rules execute train

Per stage: a control run (the job's command run to its end in a copy of the finished run, then
Snakemake asked for the job's outputs: they must equal the finished run's, which shows the comparison
is meaningful), then ``--kills`` runs SIGKILLed after a random delay (uniform in 0..1 x the control's
time), each followed by a Snakemake rerun of the job's outputs; for ``train`` also SIGTERM half-way
through. "identical" compares parquet tables as data and JSON as JSON, leaving out only what differs
between any two uninterrupted runs (tests/workflow/fault_helpers.py VOLATILE). Disk full and damaged
files run the tests of tests/test_disk_faults.py (real tmpfs, real stage commands).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the helpers live with the workflow tests

from tests.workflow.conftest import Workflow  # noqa: E402
from tests.workflow.fault_helpers import Job, Trial, finished_jobs, run_trial  # noqa: E402

#: The CPU stages (vLLM inference is out of scope: GPU sampling is not bit-reproducible).
CPU_RULES = ["barc_tasks", "execute", "refine_dataset", "evaluate_refine_prompts", "evaluate", "train"]


def outcome(trial: Trial) -> str:
    if trial.fault == "none":
        return f"ran to its end in {trial.ran_s:.1f} s"
    if not trial.hit:
        return f"ended at {trial.ran_s:.1f} s, before the signal"
    when = f"{trial.delay_s:.1f} s" + (f" after {Path(trial.after).name} appeared" if trial.after else "")
    what = f"{trial.fault} at {when} ({trial.outputs_at_stop} of {trial.outputs} outputs there)"
    if trial.fault == "SIGTERM":
        saved = re.search(r"stopped by SIGTERM; saved (checkpoint-\d+)", trial.stderr_tail)
        what += f", exit {trial.exit_status}" + (f", saved {saved.group(1)}" if saved else "")
    if trial.rule == "train":
        log = (trial.workdir / "results" / "logs" / "train.log").read_text()
        resumed = re.findall(r"resuming from \S*(checkpoint-\d+)", log)
        what += f"; rerun resumed from {resumed[-1]}" if resumed else ""
    problems = trial.half_written + [f"{n} processes left" for n in [trial.leftover_processes] if n]
    problems += [f"debris {name}" for name in trial.debris]
    return what + f"; rerun: {trial.rerun_jobs}" + (f"; PROBLEMS: {'; '.join(problems)}" if problems else "")


def stage_trials(finished: Workflow, job: Job, scratch: Path, kills: int, rng: random.Random) -> list[Trial]:
    trials = [run_trial(finished, scratch / f"{job.rule}-control", job, "none", 1e9)]
    length = trials[0].ran_s
    for index in range(kills):
        trials.append(hit(finished, scratch / f"{job.rule}-kill{index}", job, "SIGKILL", rng.uniform(0, 1) * length))
    if job.rule == "train":  # at chosen moments too: training started (TensorBoard's folder), first checkpoint
        started, first = "results/train/checkpoints/runs", "results/train/checkpoints/checkpoint-1/trainer_state.json"
        trials.append(run_trial(finished, scratch / "train-kill-ckpt", job, "SIGKILL", 0.3, after=first))
        trials.append(run_trial(finished, scratch / "train-term-step1", job, "SIGTERM", 0.3, after=started))
        trials.append(run_trial(finished, scratch / "train-term-last", job, "SIGTERM", 0.3, after=first))
    return trials


def hit(finished: Workflow, workdir: Path, job: Job, fault: str, delay_s: float) -> Trial:
    """A trial whose signal reached the running command: on this shared machine a run may be several times
    faster than the control, so a delay that missed is halved (twice at most)."""
    for attempt in range(3):
        trial = run_trial(finished, workdir.with_name(f"{workdir.name}-{attempt}"), job, fault, delay_s)
        if trial.hit:
            break
        delay_s /= 2
    return trial


#: tests/test_disk_faults.py: test -> (fault, where, what passing shows)
DISK_TESTS = {
    "test_write_table_on_a_full_disk_names_the_file_and_leaves_nothing": (
        "disk full (64 KiB tmpfs)",
        "io.write_table",
        "one DiskFullError naming the file; no temporary or partial file left",
    ),
    "test_text_and_folders_on_a_full_disk": (
        "disk full (64 KiB tmpfs)",
        "io.write_text, io.replace_folder",
        "DiskFullError naming the file or folder; nothing left",
    ),
    "test_a_stage_on_a_full_disk_says_so_in_one_line": (
        "disk full (64 KiB tmpfs)",
        "arc-tasks command, its log on the same disk",
        "exit 1, one line 'arc-pipeline arc-tasks: <file>: no space left ...', no traceback, nothing left",
    ),
    "test_a_damaged_parquet_is_named_or_read_unchanged": (
        "60 parquet copies cut short or with one bit flipped",
        "io.read_frame (every consumer)",
        "each named in one error or read back unchanged, never as other data",
    ),
    "test_the_consumer_names_a_truncated_input_and_how_to_rebuild_it": (
        "truncated intermediate parquet",
        "barc-split command",
        "exit 1, one line naming the file and how to rebuild it",
    ),
    "test_the_execute_stage_names_a_damaged_chunk_it_would_resume_from": (
        "truncated resume chunk",
        "execute (merging its chunks)",
        "named, not merged; no partial output",
    ),
}


def disk_rows() -> list[tuple[str, str, str, str, bool]]:
    """Runs tests/test_disk_faults.py (real tmpfs, real commands) and reports each fault it injects."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "tests/test_disk_faults.py"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    status = {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
            status[rest.split("::")[-1].split(" ")[0]] = word
    rows = []
    for test, (fault, where, shown) in DISK_TESTS.items():
        outcome = shown if status.get(test) == "PASSED" else f"{status.get(test, 'NOT RUN')}: see {test}"
        rows.append((fault, where, outcome, "n/a (an error is the expected end)", status.get(test) == "PASSED"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=Path, help="working directory of a finished run of config/config.yaml")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per stage")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rules", nargs="+", default=CPU_RULES)
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder (the copies) for inspection")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="fault-injection-"))
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    if args.finished is None:
        (scratch / "finished").mkdir()
        finished = Workflow(scratch / "finished", config)
        print("running the workflow once (the reference run) ...", flush=True)
        finished.snakemake()
    else:  # its own config (rewritten unchanged by Workflow)
        finished = Workflow(args.finished, yaml.safe_load((args.finished / "config.yaml").read_text()))
    jobs = finished_jobs(finished)
    rng = random.Random(args.seed)

    rows = []
    for rule in args.rules:
        for trial in stage_trials(finished, jobs[rule], scratch, args.kills, rng):
            wrong = trial.differences + trial.half_written
            identical = "NO: " + "; ".join(wrong) if wrong else "yes"
            fault = trial.fault if trial.fault != "none" else "none (control)"
            rows.append((fault, rule, outcome(trial), identical, trial.survived))
            print(" | ".join(rows[-1][:4]), flush=True)
    rows += disk_rows()

    print(f"\nmachine: {platform.processor() or platform.machine()}, {_cpu_model()}, {_cores()} cores")
    print("| fault | stage | outcome | outputs identical |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row[:4]) + " |")
    print(f"\n{sum(row[4] for row in rows)} of {len(rows)} faults survived")
    if args.keep:
        print(f"copies kept in {scratch}")
    else:
        shutil.rmtree(scratch)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _cores() -> int:
    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    main()
