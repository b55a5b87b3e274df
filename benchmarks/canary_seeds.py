"""The learning canary over several seeds: one whole workflow run per seed, then a table of the verdicts.

Each seed changes the randomness of learning, not the tasks: the tiny model's initial weights and warm-up
(``model.tiny.seed``), the sampling seed of inference (``inference.seed``) and GRPO's seed (``train.seed``).
Runs go to ``<results_dir>-seed<N>`` and are kept, so a rerun only redoes what is missing:

    python benchmarks/canary_seeds.py --configfile config/canary.yaml --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("canary_seeds")


def seed_config(configfile: Path, seed: int, work: Path) -> tuple[Path, str]:
    config = yaml.safe_load(configfile.read_text())
    results = f"{config.get('results_dir', 'results')}-seed{seed}"
    overrides = {
        "base": str(configfile.resolve()),
        "results_dir": results,
        "model": {"tiny": {"seed": seed}, "random": {"seed": seed}},
        "inference": {"seed": seed},
        "train": {"seed": 42 + seed},
    }
    path = work / f"seed{seed}.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return path, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", type=Path, default=REPO / "config" / "canary.yaml")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--profile", default="profiles/local")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    work = REPO / ".snakemake" / "canary-seeds"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in (int(seed) for seed in args.seeds.split(",")):
        configfile, results = seed_config(args.configfile, seed, work)
        started = time.perf_counter()
        command = [sys.executable, "-m", "snakemake", "--profile", args.profile, "--configfile", str(configfile)]
        # the rules call `arc-pipeline`: the one beside this interpreter, also when its venv is not activated
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
        run = subprocess.run(command, cwd=REPO, env=env, check=False, capture_output=True, text=True)
        status = run.returncode
        if status != 0:
            LOG.error("seed %d: snakemake exited %d; its last lines:\n%s", seed, status, run.stderr[-3000:])
        seconds = time.perf_counter() - started
        verdict_path = REPO / results / "canary" / "verdict.json"
        if status != 0 or not verdict_path.is_file():
            rows.append({"seed": seed, "status": status, "seconds": seconds})
            continue
        verdict = json.loads(verdict_path.read_text())
        rows.append({"seed": seed, "status": status, "seconds": seconds, **verdict})
    print(
        "| seed | reward first 20% | last 20% | ratio | base refines | RL-refiner | gain [95% CI] | verdict | run (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for row in rows:
        if "passed" not in row:
            print(f"| {row['seed']} | run failed (exit {row['status']}) | | | | | | | {row['seconds']:.0f} |")
            continue
        gain = row["gain"]
        print(
            f"| {row['seed']} | {row['reward_first']:.2f} | {row['reward_last']:.2f} | {row['reward_ratio']:.2f}x "
            f"| {row['is_correct']['refine_base']['mean']:.1%} | {row['is_correct']['refine_rl']['mean']:.1%} "
            f"| {gain['mean'] * 100:+.1f} [{gain['low'] * 100:+.1f}, {gain['high'] * 100:+.1f}] "
            f"| {'PASSED' if row['passed'] else 'FAILED'} | {row['seconds']:.0f} |"
        )
    finished = [row for row in rows if "passed" in row]
    if len(finished) > 1:
        ratios = [row["reward_ratio"] for row in finished]
        gains = [row["gain"]["mean"] * 100 for row in finished]
        print(
            f"\nmean +- sd over {len(finished)} seeds: reward ratio {statistics.mean(ratios):.2f} +- "
            f"{statistics.stdev(ratios):.2f}x, gain {statistics.mean(gains):+.1f} +- "
            f"{statistics.stdev(gains):.1f} points; "
            f"{sum(row['passed'] for row in finished)} of {len(finished)} passed"
        )


if __name__ == "__main__":
    main()
