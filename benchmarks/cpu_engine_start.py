"""How long a CPU stage waits for its vLLM engine: the engine inside the stage's process against vLLM's own
engine and worker processes (``arc_pipeline/generation/engine_args.py``, ``platform_environment``).

Each start runs in a fresh process, as a stage does: import, engine start, one small seeded generation, close.
The two modes alternate, so that a machine's changing load touches both alike. Needs a model folder, such as
the tiny model of the embedded default run (``make run`` writes ``results/model/base``):

    python benchmarks/cpu_engine_start.py --model results/model/base --repeats 3

Prints, per mode, the engine start (``Engine`` built, vLLM imported) and the whole process (interpreter start to
exit), and whether the completions of every start were the same.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = {"in the stage's process": "0", "vLLM's own processes": "1"}

ONE_START = """
import json, sys, time
from arc_pipeline.generation.engine import Engine, EngineConfig, SamplingConfig
if __name__ == "__main__":
    config = EngineConfig(model=sys.argv[1], enforce_eager=True, max_model_len=4096, kv_cache_memory_gib=0.25)
    started = time.perf_counter()
    with Engine(config) as engine:
        ready = time.perf_counter() - started
        generations = engine.generate(["def transform(grid):"], SamplingConfig(n=4, max_tokens=64, seed=3))
    texts = [completion.text for completion in generations.completions[0]]
    print(json.dumps({"start_s": ready, "texts": texts}))
"""


def one_start(model: Path, multiprocessing: str) -> dict:
    environment = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING=multiprocessing)
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", ONE_START, str(model)], env=environment, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(
            f"engine start failed (VLLM_ENABLE_V1_MULTIPROCESSING={multiprocessing}):\n{result.stderr[-3000:]}"
        )
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return {**measured, "process_s": time.perf_counter() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a model folder (results/model/base of make run)")
    parser.add_argument("--repeats", type=int, default=3, help="starts per mode")
    args = parser.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"{args.model}: no config.json; run `make run` first or pass a model folder")
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for repeat in range(args.repeats):
        for mode, value in MODES.items():
            runs[mode].append(one_start(args.model, value))
            print(f"repeat {repeat + 1}, {mode}: engine start {runs[mode][-1]['start_s']:.1f} s", file=sys.stderr)
    texts = {json.dumps(run["texts"]) for mode_runs in runs.values() for run in mode_runs}
    print("| engine | starts | engine start, mean (min-max) (s) | whole process, mean (s) |")
    print("|---|---:|---|---:|")
    for mode, mode_runs in runs.items():
        starts = [run["start_s"] for run in mode_runs]
        process = statistics.mean(run["process_s"] for run in mode_runs)
        print(
            f"| {mode} | {len(starts)} | {statistics.mean(starts):.1f} ({min(starts):.1f}-{max(starts):.1f}) "
            f"| {process:.1f} |"
        )
    print(f"\nthe same completions in every start: {'yes' if len(texts) == 1 else 'NO'}")


if __name__ == "__main__":
    main()
