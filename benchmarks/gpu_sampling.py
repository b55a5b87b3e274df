"""What each sampling setting of the GRPO rollouts costs vLLM's generation, on the model and prompts of
``benchmarks/gpu_grpo.py`` (run that first: it builds them under ``--work``).

One vLLM engine, built the way TRL's colocate mode builds it (in-process, ``gpu_memory_utilization`` 0.3,
``max_num_seqs`` 32, ``max_num_batched_tokens`` 4096, ``logprobs_mode`` processed_logprobs), generates a step's 32
full-length completions of one prompt under each setting in turn; it prints seconds per generation (mean of
``--repeats`` after one warm-up) and milliseconds per decode step:

    python benchmarks/gpu_sampling.py --work /tmp/grpo-bench
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

# TRL's colocated SamplingParams for the preset (config/barc-multiturn.yaml), then one change each
TRL_PRESET: dict[str, Any] = {
    "n": 1,
    "temperature": 1.0,
    "top_p": 0.95,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.02,
    "logprobs": 0,
}
SETTINGS: dict[str, dict[str, Any]] = {
    "preset (TRL's)": {},
    "no sampled-token logprobs": {"logprobs": None},
    "no repetition penalty": {"repetition_penalty": 1.0},
    "no top-p": {"top_p": 1.0},
    "none of the three": {"logprobs": None, "repetition_penalty": 1.0, "top_p": 1.0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="gpu_grpo.py's work folder (model and prompts)")
    parser.add_argument("--completions", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cascade", action="store_true", help="engine with vLLM's cascade attention on")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process, as TRL's colocate mode runs it

    import polars as pl
    from vllm import LLM, SamplingParams

    inputs = json.loads((args.work / "inputs.json").read_text())
    prompt = pl.read_parquet(inputs["dataset"])["prompt"][0]
    started = time.perf_counter()
    llm = LLM(
        model=inputs["model"],
        gpu_memory_utilization=0.3,
        max_num_seqs=args.completions,
        max_num_batched_tokens=4096,
        max_model_len=4096,
        logprobs_mode="processed_logprobs",
        seed=0,
        disable_cascade_attn=not args.cascade,
    )
    tokenizer = llm.get_tokenizer()
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]  # rendered with the chat template
    prompts = [{"prompt_token_ids": list(prompt_ids)} for _ in range(args.completions)]
    print(f"engine start {time.perf_counter() - started:.0f} s; prompt {len(prompt_ids)} tokens", flush=True)
    rows = []
    for name, change in SETTINGS.items():
        params = SamplingParams(**{**TRL_PRESET, **change, "max_tokens": args.max_tokens, "ignore_eos": True})
        llm.generate(prompts, sampling_params=params, use_tqdm=False)  # warm-up
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            outputs = llm.generate(prompts, sampling_params=params, use_tqdm=False)
            seconds.append(time.perf_counter() - start)
        tokens = max(len(output.outputs[0].token_ids) for output in outputs)
        mean = sum(seconds) / len(seconds)
        rows.append((name, mean, 1000 * mean / tokens))
        print(f"{name}: {mean:.2f} s", flush=True)
    print(f"| setting ({args.completions} x {args.max_tokens} tokens) | generation (s) | ms per decode step |")
    print("|---|---:|---:|")
    for name, mean, per_step in rows:
        print(f"| {name} | {mean:.2f} | {per_step:.2f} |")


if __name__ == "__main__":
    main()
