"""Short GRPO runs at several learning rates on a canary run's own refinement dataset and model.

A learning rate that teaches the tiny model in 50 steps collapses an 8B one, and the published rate moves
nothing in 50 steps: the canary's rate depends on the model's width and depth. This script takes a canary
run that has reached ``refine_dataset`` (``snakemake ... --configfile config/canary-gpu.yaml
results/canary-gpu/refine_dataset/refinement.parquet``), runs the ``train`` stage command for a few steps at
each rate, with the preset's other train settings, and prints the reward of the first and last windows:

    python benchmarks/canary_lr_sweep.py --configfile config/canary-gpu.yaml --rates 5e-6,1.5e-5,4e-5 --steps 24

Nothing of the run is changed: each rate trains into its own folder under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from arc_pipeline.config.prepare import prepare_config

REPO = Path(__file__).resolve().parent.parent


def train_section(configfile: Path) -> tuple[dict, str]:
    config = yaml.safe_load(configfile.read_text())
    prepare_config(config, {}, REPO, [str(configfile)])
    return config["train"], config["results_dir"]


def train_command(results: str | Path, folder: Path, settings: dict, threads: int) -> list[str]:
    """The ``train`` stage command on a canary run's refinement dataset and model, writing into ``folder``."""
    return [
        "arc-pipeline",
        "--log-file",
        str(folder / "train.log"),
        "train",
        "--dataset",
        f"{results}/refine_dataset/refinement.parquet",
        "--model",
        f"{results}/model/base",
        "--checkpoint-dir",
        str(folder / "checkpoints"),
        "--output",
        str(folder / "adapter"),
        "--metrics",
        str(folder / "metrics.parquet"),
        "--threads",
        str(threads),
        "--config-json",
        json.dumps(settings),
    ]


def run_rate(rate: float, steps: int, train: dict, results: str, work: Path, threads: int) -> dict:
    folder = work / f"lr{rate:g}"
    settings = {**train, "learning_rate": rate, "max_steps": steps, "save_steps": 10_000, "report_to": ["none"]}
    command = train_command(results, folder, settings, threads)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    status = subprocess.run(command, cwd=REPO, check=False).returncode
    row = {"learning rate": f"{rate:g}", "exit": status, "seconds": round(time.perf_counter() - started)}
    metrics_path = folder / "metrics.parquet"
    if metrics_path.is_file():
        metrics = pl.read_parquet(metrics_path)
        reward = metrics.filter(pl.col("name") == f"rewards/{train['reward']}/mean").sort("step")["value"].to_numpy()
        size = max(1, math.ceil(len(reward) * 0.2))
        row.update(
            steps=len(reward),
            first=round(float(np.nanmean(reward[:size])), 2),
            last=round(float(np.nanmean(reward[-size:])), 2),
            curve=" ".join(f"{value:.1f}" for value in reward),
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", type=Path, required=True, help="the canary preset the run used")
    parser.add_argument("--rates", required=True, help="comma-separated learning rates")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--threads", type=int, default=8, help="reward sandbox workers")
    parser.add_argument("--work", type=Path, default=Path("results/lr-sweep"))
    args = parser.parse_args()
    train, results = train_section(args.configfile)
    rows = [
        run_rate(float(rate), args.steps, train, results, args.work, args.threads) for rate in args.rates.split(",")
    ]
    print("| learning rate | exit | seconds | steps | first 20% | last 20% | reward per step |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for row in rows:
        cells = [row.get(key, "") for key in ("learning rate", "exit", "seconds", "steps", "first", "last", "curve")]
        print("| " + " | ".join(str(cell) for cell in cells) + " |")


if __name__ == "__main__":
    main()
