"""The learning canary over several seeds: one whole workflow run per seed, then a table of the verdicts.

Each seed changes the randomness of learning, not the tasks: the tiny model's initial weights and warm-up
(``model.tiny.seed``), the sampling seed of inference (``inference.seed``), GRPO's seed (``train.seed``) and
SFT's (``sft.seed``). Runs go to ``<results_dir>-seed<N>`` and are kept, so a rerun only redoes what is missing:

    python benchmarks/canary_seeds.py --configfile config/canary.yaml --seeds 0,1,2

``--mutation`` (or ``--mutation sft``) trains the SFT refiner on the base model's failed refinements instead of its
solves (``sft_dataset.keep: failed``, into ``<results_dir>-seed<N>-mutation``): its verdict must be FAILED on the
SFT check, or that check cannot tell a refiner that learned from one that did not.

``--mutation search`` makes every search round refine a random earlier program without its execution feedback
(``evaluate.search: {parents: random, feedback: false}``, into ``<results_dir>-seed<N>-search-mutation``): its
verdict must be FAILED on the search check. Training is the same as the seed's own run, so the folder starts as a
copy of that run without its search (when the run exists), and only the search and the verdict run again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("canary_seeds")


MUTATIONS = {
    "sft": ("-mutation", {"sft_dataset": {"keep": "failed"}}),
    "search": ("-search-mutation", {"evaluate": {"search": {"parents": "random", "feedback": False}}}),
}
# what a search mutation's copy of the seed's run leaves out: the search's own files, and what reads them
SEARCH_OUTPUTS = ("evaluate/search", "evaluate/report/search", "canary")


def seed_config(
    configfile: Path, seed: int, work: Path, mutation: str | None = None, results_prefix: str | None = None
) -> tuple[Path, str]:
    config = yaml.safe_load(configfile.read_text())
    suffix, changes = MUTATIONS[mutation] if mutation else ("", {})
    results = f"{results_prefix or config.get('results_dir', 'results')}-seed{seed}" + suffix
    overrides = {
        "base": str(configfile.resolve()),
        "results_dir": results,
        "model": {"tiny": {"seed": seed}, "random": {"seed": seed}},
        "inference": {"seed": seed},
        "train": {"seed": 42 + seed},
        "sft": {"seed": 42 + seed},
        **changes,
    }
    path = work / f"seed{seed}{suffix}.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return path, results


def start_from_seed_run(seed_run: Path, mutated: Path) -> None:
    """The seed's own run copied (times kept, so nothing upstream reruns) without the search's files, once."""
    if mutated.exists() or not seed_run.is_dir():
        return
    shutil.copytree(seed_run, mutated, symlinks=True)
    for relative in SEARCH_OUTPUTS:
        for path in mutated.glob(relative + "*"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    LOG.info("%s: a copy of %s without its search", mutated, seed_run)


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
    parser.add_argument(
        "--mutation",
        nargs="?",
        const="sft",
        choices=sorted(MUTATIONS),
        help="sft: SFT on the failed refinements; search: random parents without feedback (each must fail)",
    )
    parser.add_argument("--results-prefix", help="results folders <this>-seed<N> (default: the config's results_dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    work = REPO / ".snakemake" / "canary-seeds"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in (int(seed) for seed in args.seeds.split(",")):
        configfile, results = seed_config(args.configfile, seed, work, args.mutation, args.results_prefix)
        if args.mutation == "search":
            start_from_seed_run(
                REPO / seed_config(args.configfile, seed, work, None, args.results_prefix)[1], REPO / results
            )
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
        "| seed | reward first 20% | after it | ratio | last 20% | base refines | RL-refiner | gain [95% CI] "
        "| SFT-refiner | SFT gain [95% CI] | SFT+RL-refiner | SFT+RL - RL [95% CI] | search: RL - base [95% CI] "
        "| verdict | run (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---|---|---|---:|")
    for row in rows:
        if "passed" not in row:
            print(f"| {row['seed']} | run failed (exit {row['status']}) |" + " |" * 12 + f" {row['seconds']:.0f} |")
            continue
        share = partial(run_share, row["is_correct"])
        print(
            f"| {row['seed']} | {row['reward_first']:.2f} | {row.get('reward_later', float('nan')):.2f} "
            f"| {row['reward_ratio']:.2f}x | {row['reward_last']:.2f} "
            f"| {share('refine_base')} | {share('refine_rl')} | {points(row['gain'])} "
            f"| {share('refine_sft')} | {points(row.get('sft_gain'))} "
            f"| {share('refine_sft_rl')} | {points(row.get('sft_rl_vs_rl'))} "
            f"| {'; '.join(points(check['rl_over_base']) for check in row.get('search') or []) or '-'} "
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
