"""The train stage's faults in a layout of several processes, in one script: docs/reliability.md's "Several GPUs"
tables (a SIGKILL of a rank, a SIGKILL of the vLLM server, SIGTERM to the stage), each during the step after a
checkpoint, each followed by a rerun that must resume from that checkpoint, the last rerun to the end.

It runs the stage itself (``arc-pipeline train``, the command the Snakemake rule runs) on ``benchmarks/gpu_grpo.py``'s
inputs (random 8B-shape weights, full-length completions) with the settings of one of its launched variants
(``--layout``) plus ``save_steps`` and ``max_steps``, on the GPUs of ``CUDA_VISIBLE_DEVICES``:

    CUDA_VISIBLE_DEVICES=0,1 python benchmarks/gpu_faults.py --work /tmp/gb --layout server-1+1-overlap-fused

One row per fault: when it was sent, how the stage ended (exit status, seconds after the fault, its last line),
which of the job's processes were still running when it ended, each GPU's used memory 3 s later, and what the
next run resumed from; then whether the metrics hold every step once. The rows go to the terminal as a markdown
table and to ``<work>/faults-<layout>.json``.

``--model``, ``--dataset`` and ``--set`` run it elsewhere: on a CPU with a tiny model and ``--layout dp-2 --set
'{"use_vllm": false, "use_cpu": true}'`` it checks the script itself (a layout without a server skips the server's
fault).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_grpo and gpu_bench_inputs beside this file

from gpu_bench_inputs import build_inputs
from gpu_grpo import BASE_SETTINGS, VARIANTS

from arc_pipeline.training.processes.supervisor import TAG_VARIABLE

log = logging.getLogger("gpu_faults")

#: fault -> the step it is sent during (after the checkpoint of the step before), as docs/reliability.md's tables
FAULT_STEPS = {"rank-kill": 3, "server-kill": 5, "stage-term": 7}
LAST_LINES = 4


@dataclass
class Run:
    """One start of the stage: the fault sent during it (none for the last run) and how it ended."""

    fault: str | None
    step: int | None = None  # the step the fault was sent during
    status: int | None = None
    seconds_to_exit: float | None = None  # from the fault to the stage's exit
    last_line: str = ""
    left_running: list[str] = field(default_factory=list)
    gpu_memory_mib: list[int] = field(default_factory=list)  # each visible GPU, 3 s after the stage ended
    resumed_from: str | None = None  # what this run resumed from (its log's "resuming from")
    seconds: float = 0.0


def process_environment(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def parent_pid(pid: int) -> int | None:
    try:
        # the field after the command name in parentheses, which may itself hold spaces
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def job_processes(stage_pid: int) -> dict[int, str]:
    """pid -> command line of every live process of the stage's job: the supervisor tags each child's environment
    with ``<stage pid>-...`` (arc_pipeline/training/processes/supervisor.py), and their children inherit it."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if process_environment(pid).get(TAG_VARIABLE, "").startswith(f"{stage_pid}-"):
            found[pid] = command_line(pid)
    return found


def fault_target(fault: str, stage_pid: int) -> int | None:
    """The pid the fault goes to: the stage itself, the job's vLLM server (the stage's child whose command is
    vLLM's; ``trl vllm-serve`` replaces itself with ``vllm ... serve``) or its first training rank."""
    if fault == "stage-term":
        return stage_pid
    processes = job_processes(stage_pid)
    if fault == "server-kill":
        servers = [  # the ranks' torchrun is the stage's child too, and its arguments name --vllm-server-port
            pid
            for pid, line in processes.items()
            if parent_pid(pid) == stage_pid and "vllm" in line and "torch.distributed.run" not in line
        ]
        return min(servers) if servers else None
    ranks = [pid for pid in processes if process_environment(pid).get("LOCAL_RANK") is not None]
    return min(ranks, key=lambda pid: int(process_environment(pid)["LOCAL_RANK"])) if ranks else None


def gpu_memory() -> list[int]:
    query = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    wanted = set(visible.split(",")) if visible else None
    used = []
    for line in done.stdout.splitlines():
        index, mib = (part.strip() for part in line.split(","))
        if wanted is None or index in wanted:
            used.append(int(mib))
    return used


def complete_checkpoint(checkpoints: Path, step: int) -> bool:
    return (checkpoints / f"checkpoint-{step}" / "trainer_state.json").is_file()


def start_stage(command: list[str], log_path: Path) -> subprocess.Popen:
    with log_path.open("w") as out:
        # its own session, as a batch system's job: a signal to it is not one to this script
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def run_once(command: list[str], log_path: Path, checkpoints: Path, fault: str | None, delay_s: float) -> Run:
    run = Run(fault)
    started = time.monotonic()
    stage = start_stage(command, log_path)
    fault_at = None
    if fault is not None:
        run.step = FAULT_STEPS[fault]
        while stage.poll() is None and not complete_checkpoint(checkpoints, run.step - 1):
            time.sleep(0.5)
        time.sleep(delay_s)  # into the step after the checkpoint
        target = fault_target(fault, stage.pid) if stage.poll() is None else None
        if target is None:
            log.warning("%s: no process to send it to (the stage ended or has no such process)", fault)
        else:
            target_command = command_line(target)
            os.kill(target, signal.SIGTERM if fault == "stage-term" else signal.SIGKILL)
            fault_at = time.monotonic()
            log.info("%s: sent to pid %d (%s)", fault, target, target_command[:160])
    run.status = stage.wait()
    ended = time.monotonic()
    run.seconds = ended - started
    run.seconds_to_exit = None if fault_at is None else ended - fault_at
    run.left_running = sorted(f"{pid}: {line[:100]}" for pid, line in job_processes(stage.pid).items())
    time.sleep(3)
    run.gpu_memory_mib = gpu_memory()
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    run.last_line = lines[-1] if lines else ""
    resumed = [line.split("resuming from", 1)[1].strip() for line in lines if "resuming from" in line]
    run.resumed_from = Path(resumed[0]).name if resumed else None
    return run


def stage_command(inputs: dict[str, Any], out: Path, config: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "arc_pipeline.cli",
        "train",
        *("--dataset", str(inputs["dataset"]), "--model", str(inputs["model"])),
        *("--output", str(out / "adapter"), "--metrics", str(out / "metrics.parquet")),
        *("--checkpoint-dir", str(out / "checkpoints")),
        *("--config-json", json.dumps(config)),
    ]


def metrics_steps(metrics: Path) -> tuple[list[int], bool]:
    """The steps the metrics hold, and whether each (step, metric) is there once: a resumed run must not log a
    step twice (TRAIN_METRICS_SCHEMA is long: one row per step and metric)."""
    import polars as pl

    try:
        table = pl.read_parquet(metrics)
    except (OSError, pl.exceptions.PolarsError):
        return [], False
    once = table.group_by("step", "name").len()["len"].max() == 1
    return sorted(table["step"].unique().to_list()), bool(once)


def print_table(runs: list[Run]) -> None:
    print(
        "| fault | during step | the stage | seconds from the fault to its exit | left running "
        "| GPUs' memory 3 s after (MiB) | the next run resumed from |"
    )
    print("|---|---:|---|---:|---|---|---|")
    for run, following in zip(runs, [*runs[1:], None], strict=True):
        name = run.fault or "rerun to the end"
        exit_text = f"exit {run.status}: `{run.last_line[-160:]}`"
        seconds = "" if run.seconds_to_exit is None else f"{run.seconds_to_exit:.0f}"
        left = "; ".join(run.left_running) or "nothing"
        memory = ", ".join(map(str, run.gpu_memory_mib)) or "-"
        resumed = (following.resumed_from or "nothing (started afresh)") if following is not None else ""
        print(f"| {name} | {run.step or ''} | {exit_text} | {seconds} | {left} | {memory} | {resumed} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="gpu_grpo.py's work folder (its inputs are reused)")
    parser.add_argument("--layout", required=True, help="a launched variant of benchmarks/gpu_grpo.py")
    parser.add_argument("--faults", default=",".join(FAULT_STEPS), help=f"comma-separated, of {list(FAULT_STEPS)}")
    parser.add_argument("--delay", type=float, default=3.0, help="seconds into the step before the fault")
    parser.add_argument("--grid-side", type=int, default=12, help="side of the random grids (prompt length)")
    parser.add_argument("--model", type=Path, help="a model folder instead of the random 8B one")
    parser.add_argument("--dataset", type=Path, help="a refinement parquet instead of the random prompts")
    parser.add_argument("--set", default="{}", help="JSON of train settings over the layout's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.layout not in VARIANTS:
        raise SystemExit(f"unknown layout {args.layout!r}; choose from {list(VARIANTS)}")
    faults = [name.strip() for name in args.faults.split(",") if name.strip()]
    unknown = sorted(set(faults) - set(FAULT_STEPS))
    if unknown:
        raise SystemExit(f"unknown faults {unknown}; choose from {list(FAULT_STEPS)}")
    config = {**BASE_SETTINGS, **VARIANTS[args.layout], "save_steps": 2, "max_steps": 8, **json.loads(args.set)}
    if config.get("vllm_mode") != "server" and "server-kill" in faults:
        log.info("layout %s has no vLLM server: no server-kill", args.layout)
        faults.remove("server-kill")
    faults.sort(key=FAULT_STEPS.__getitem__)
    if args.model and args.dataset:
        inputs: dict[str, Any] = {"model": str(args.model), "dataset": str(args.dataset)}
    else:
        inputs = build_inputs(args.work, args.grid_side, rows=config["max_steps"] + 2)
    out = args.work / f"faults-{args.layout}"
    if out.exists():
        raise SystemExit(f"{out} exists: move it away to run the faults again")
    out.mkdir(parents=True)
    command = stage_command(inputs, out, config)
    runs = []
    for index, fault in enumerate([*faults, None]):
        run = run_once(command, out / f"run{index}.log", out / "checkpoints", fault, args.delay)
        runs.append(run)
        log.info("run %d (%s): exit %s after %.0f s", index, fault or "to the end", run.status, run.seconds)
        (args.work / f"faults-{args.layout}.json").write_text(json.dumps([asdict(item) for item in runs], indent=2))
        if fault is None or run.status == 0:
            break  # the last run, or a fault that did not stop the stage
    steps, once = metrics_steps(out / "metrics.parquet")
    every_step = steps == list(range(1, config["max_steps"] + 1))
    print_table(runs)
    print(
        f"metrics: every step 1..{config['max_steps']}: {every_step} ({len(steps)} steps), each step's metrics "
        f"once: {once}; adapter written: {(out / 'adapter' / 'adapter_config.json').is_file()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
