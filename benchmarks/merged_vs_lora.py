"""The trained adapter served two ways on a finished run's refinement prompts: base model + LoRA in vLLM
(``evaluate.merge_adapter: false``) against the adapter merged into the base weights (rule
``merge_adapter``), both under greedy sampling (issue 32, item 2).

Runs ``arc-pipeline inference`` twice on ``<results>/evaluate/refine_prompts.parquet`` with the run's own
refinement settings (``inference`` with ``evaluate.engine`` over it) and ``temperature: 0``, each in a
process of its own: once as ``<results>/model/base`` + the refiner's adapter, once as
``<results>/evaluate/merged_<refiner>``. Prints engine start, generation time and tokens/s of each, and the
share of prompts whose two completions are the same text (bf16 rounding of the merged weights may split a
few near-ties).

    python benchmarks/merged_vs_lora.py --configfile config/canary-gpu.yaml my-merged-run.yaml

The run must have been made with ``evaluate.merge_adapter: true`` (so the merged folder exists).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"vLLM engine ready in ([0-9.]+) s")
GENERATED = re.compile(r"generated \d+ completions \((\d+) tokens\) for \d+ prompts in ([0-9.]+) s")


def refinement_settings(configfiles: list[Path]) -> tuple[Path, dict[str, Any]]:
    """The run's results folder and its refinement inference settings (rules/evaluate.smk's own function)."""
    sys.path.insert(0, str(REPO))
    from arc_pipeline.config.evaluation_settings import refinement_inference
    from arc_pipeline.config.prepare import deep_merge, prepare_config

    config: dict[str, Any] = {}
    for path in configfiles:  # later files over earlier ones, key by key, as Snakemake merges --configfile
        config = deep_merge(config, yaml.safe_load(path.read_text()))
    workflow = prepare_config(config, {}, REPO, [str(p) for p in configfiles])
    return Path(workflow.results_dir), refinement_inference(workflow)


def run_inference(prompts: Path, model: Path, adapter: Path | None, settings: dict[str, Any], out: Path) -> dict:
    """One ``arc-pipeline inference`` process; its figures from its log."""
    log_file = out.with_suffix(".log")
    command = [sys.executable, "-m", "arc_pipeline.cli", "--log-file", str(log_file), "inference"]
    command += ["--refinements", str(prompts), "--model", str(model), "--output", str(out)]
    command += [*(["--adapter", str(adapter)] if adapter else []), "--config-json", json.dumps(settings)]
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    text = log_file.read_text()
    ready, generated = READY.search(text), GENERATED.search(text)
    if ready is None or generated is None:
        raise RuntimeError(f"{log_file}: no engine start or generation line")
    tokens, seconds = int(generated.group(1)), float(generated.group(2))
    return {
        "process_s": time.perf_counter() - started,
        "start_s": float(ready.group(1)),
        "generate_s": seconds,
        "tokens_per_s": tokens / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", type=Path, nargs="+", required=True, help="the run's config files")
    parser.add_argument("--refiner", default="rl", help="the refiner whose adapter is compared (default rl)")
    parser.add_argument("--adapter", type=Path, help="its adapter folder (default: <results>/train/adapter)")
    parser.add_argument("--out", type=Path, help="folder for the two prediction files (default: a temporary one)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import polars as pl

    results, settings = refinement_settings(args.configfile)
    results = results if results.is_absolute() else REPO / results
    settings = dict(settings, temperature=0.0)
    adapter = args.adapter or results / "train" / "adapter"
    merged = results / "evaluate" / f"merged_{args.refiner}"
    prompts = results / "evaluate" / "refine_prompts.parquet"
    for path in (adapter, merged, prompts, results / "model" / "base"):
        if not path.exists():
            raise SystemExit(f"{path}: not found (run the workflow with evaluate.merge_adapter: true first)")
    out = args.out or Path(tempfile.mkdtemp(prefix="merged-vs-lora-"))
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "base + LoRA": run_inference(prompts, results / "model" / "base", adapter, settings, out / "lora.parquet"),
        "merged": run_inference(prompts, merged, None, settings, out / "merged.parquet"),
    }
    lora = pl.read_parquet(out / "lora.parquet").select("prediction_id", lora="text")
    both = pl.read_parquet(out / "merged.parquet").select("prediction_id", merged="text").join(lora, on="prediction_id")
    same = int((both["lora"] == both["merged"]).sum())
    print(f"\n{results}: {both.height} refinement prompts, greedy, {settings.get('max_tokens')} tokens at most\n")
    print("| served as | engine start (s) | generation (s) | generated tokens/s | process (s) |")
    print("|---|---:|---:|---:|---:|")
    for name, row in figures.items():
        print(
            f"| {name} | {row['start_s']:.1f} | {row['generate_s']:.1f} | {row['tokens_per_s']:.0f} "
            f"| {row['process_s']:.0f} |"
        )
    print(f"\nsame completion: {same} of {both.height} prompts ({100 * same / max(both.height, 1):.1f}%)")


if __name__ == "__main__":
    main()
