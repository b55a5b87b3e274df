"""The canary's GRPO step on CPU under three ways for torch's OpenMP threads to wait, alone and beside a copy.

Why: Snakemake runs CPU jobs side by side, and the test suite runs the canary beside the Slurm run on 2 cores.
Threads that spin while they wait burn the core the other process needs (arc_pipeline/cpu_threads.py).

    python benchmarks/cpu_wait_policy.py --results /tmp/wait-policy/results --steps 8

``--results``: a canary results folder with ``refine_dataset/refinement.parquet`` and ``model/base``; made first
(``config/canary.yaml`` up to ``refine_dataset``, a few minutes) when missing. Each run is the real train stage
(``arc-pipeline train``, the preset's own train settings but ``--steps`` steps and no checkpoints) in its own
folder. Variants: ``active`` (``OMP_WAIT_POLICY=ACTIVE``: threads spin), ``passive`` (the stages' default now),
``one-thread`` (``OMP_NUM_THREADS=1``). Settings: ``alone``; ``beside a copy``: two identical train stages
started together (the figure is the slower one's). Prints a markdown table of the mean step time over steps
2..N (each step's ``step_time`` in the run's metrics.parquet) and the run's wall time.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from canary_lr_sweep import train_command, train_section

REPO = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("cpu_wait_policy")
VARIANTS = {
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "one-thread": {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"},
}


def canary_train_settings(steps: int) -> dict:
    train, _ = train_section(REPO / "config" / "canary.yaml")
    return {**train, "max_steps": steps, "save_steps": 10_000, "report_to": ["none"]}


def make_inputs(results: Path) -> None:
    if (results / "refine_dataset" / "refinement.parquet").exists() and (results / "model" / "base").is_dir():
        return
    LOG.info("making the canary's refinement dataset and model in %s", results)
    command = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--configfile", "config/canary.yaml"]
    command += ["--config", f"results_dir={results}", "--until", "refine_dataset", "model"]
    subprocess.run(command, cwd=REPO, check=True)


def start_train(results: Path, out: Path, settings: dict, env: dict[str, str]) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    command = train_command(results, out, settings, os.cpu_count() or 1)
    return subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def mean_step(out: Path) -> float:
    import polars as pl

    metrics = pl.read_parquet(out / "metrics.parquet")
    steps = metrics.filter((pl.col("name") == "step_time") & (pl.col("step") >= 2))["value"].to_list()
    return statistics.mean(steps)


def run_variant(results: Path, work: Path, name: str, settings: dict, copies: int) -> tuple[float, float]:
    """The slowest copy's mean step time and the wall time of the whole run."""
    outs = [work / f"{name}-{copies}x-{i}" for i in range(copies)]
    started = time.monotonic()
    processes = [start_train(results, out, settings, VARIANTS[name]) for out in outs]
    for out, process in zip(outs, processes, strict=True):
        if process.wait() != 0:
            raise SystemExit(f"{name}: the train stage exited {process.returncode}; see {out / 'train.log'}")
    return max(mean_step(out) for out in outs), time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=Path("/tmp/wait-policy/results"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    results = args.results.resolve()
    make_inputs(results)
    settings = canary_train_settings(args.steps)
    work = results.parent / "runs"
    rows = []
    for name in args.variants.split(","):
        for copies in (1, 2):
            step, wall = run_variant(results, work, name, settings, copies)
            LOG.info("%s, %d at once: %.2f s a step, %.0f s", name, copies, step, wall)
            rows.append((name, "alone" if copies == 1 else "beside a copy", step, wall))
    print(f"\n{os.cpu_count()} CPUs; {args.steps} steps of the canary's train stage; mean step_time of steps 2..N\n")
    print("| variant | setting | step (s) | run wall (s) |\n|---|---|---:|---:|")
    for name, setting, step, wall in rows:
        print(f"| {name} | {setting} | {step:.2f} | {wall:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
