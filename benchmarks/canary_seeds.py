"""The learning canary over several seeds: one whole workflow run per seed, then a table of the verdicts.

Each seed changes the randomness of learning, not the tasks: the tiny model's initial weights and warm-up
(``model.tiny.seed``), the sampling seed of inference (``inference.seed``), GRPO's seed (``train.seed``) and
SFT's (``sft.seed``). Runs go to ``<results_dir>-seed<N>`` and are kept, so a rerun only redoes what is missing:

    python benchmarks/canary_seeds.py --configfile config/canary.yaml --seeds 0,1,2

``--mutation`` trains the SFT refiner on the base model's failed refinements instead of its solves
(``sft_dataset.keep: failed``, into ``<results_dir>-seed<N>-mutation``): its verdict must be FAILED on the
SFT check, or that check cannot tell a refiner that learned from one that did not.
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
from functools import partial
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("canary_seeds")


def seed_config(
    configfile: Path, seed: int, work: Path, mutation: bool = False, results_prefix: str | None = None
) -> tuple[Path, str]:
    config = yaml.safe_load(configfile.read_text())
    results = f"{results_prefix or config.get('results_dir', 'results')}-seed{seed}" + ("-mutation" if mutation else "")
    overrides = {
        "base": str(configfile.resolve()),
        "results_dir": results,
        "model": {"tiny": {"seed": seed}, "random": {"seed": seed}},
        "inference": {"seed": seed},
        "train": {"seed": 42 + seed},
        "sft": {"seed": 42 + seed},
        **({"sft_dataset": {"keep": "failed"}} if mutation else {}),
    }
    path = work / f"seed{seed}{'-mutation' if mutation else ''}.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return path, results


def run_share(is_correct: dict, run: str) -> str:
    """A run's held-out is_correct as a percentage, or '-' when the evaluation did not have the run."""
    return f"{is_correct[run]['mean']:.1%}" if run in is_correct else "-"


def points(estimate: dict | None) -> str:
    """A paired difference in points with its interval, or '-' when the run did not have it."""
    if estimate is None:
        return "-"
    return f"{estimate['mean'] * 100:+.1f} [{estimate['low'] * 100:+.1f}, {estimate['high'] * 100:+.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", type=Path, default=REPO / "config" / "canary.yaml")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--profile", default="profiles/local")
    parser.add_argument("--mutation", action="store_true", help="SFT on the failed refinements (must fail)")
    parser.add_argument("--results-prefix", help="results folders <this>-seed<N> (default: the config's results_dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    work = REPO / ".snakemake" / "canary-seeds"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in (int(seed) for seed in args.seeds.split(",")):
        configfile, results = seed_config(args.configfile, seed, work, args.mutation, args.results_prefix)
        started = time.perf_counter()
        command = [sys.executable, "-m", "snakemake", "--profile", args.profile, "--configfile", str(configfile)]
        # the rules call `arc-pipeline`: the one beside this interpreter, also when its venv is not activated
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
        run = subprocess.run(command, cwd=REPO, env=env, check=False, capture_output=True, text=True)
        status = run.returncode
        if status != 0:
            LOG.error("seed %d: snakemake exited %d; its last lines:\n%s", seed, status, run.stderr[-3000:])
        seconds = time.perf_counter() - started
        verdict_path = REPO / results / "canary" / "verdict.json"  # REPO / an absolute path is that path
        if status != 0 or not verdict_path.is_file():
            rows.append({"seed": seed, "status": status, "seconds": seconds})
            continue
        verdict = json.loads(verdict_path.read_text())
        rows.append({"seed": seed, "status": status, "seconds": seconds, **verdict})
    print(
        "| seed | reward first 20% | last 20% | ratio | base refines | RL-refiner | gain [95% CI] "
        "| SFT-refiner | SFT gain [95% CI] | SFT+RL-refiner | SFT+RL - RL [95% CI] | verdict | run (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---|---|---:|")
    for row in rows:
        if "passed" not in row:
            print(f"| {row['seed']} | run failed (exit {row['status']}) |" + " |" * 10 + f" {row['seconds']:.0f} |")
            continue
        share = partial(run_share, row["is_correct"])
        print(
            f"| {row['seed']} | {row['reward_first']:.2f} | {row['reward_last']:.2f} | {row['reward_ratio']:.2f}x "
            f"| {share('refine_base')} | {share('refine_rl')} | {points(row['gain'])} "
            f"| {share('refine_sft')} | {points(row.get('sft_gain'))} "
            f"| {share('refine_sft_rl')} | {points(row.get('sft_rl_vs_rl'))} "
            f"| {'PASSED' if row['passed'] else 'FAILED: ' + '; '.join(row['reasons'])} | {row['seconds']:.0f} |"
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
