"""GRPO throughput on one GPU: a few steps of a ~1B random Llama in bf16 with the refinement LoRA.

Runs fully offline: the model is built here with random weights, the tokenizer is taken from a
folder passed as an argument (e.g. the tiny model folder made by ``arc-pipeline model``, which has
the Llama 3.1 special tokens and chat template), and the prompts are real refinement prompts of
random ARC-sized tasks. Uses the pipeline's own training code (``arc_pipeline.training.grpo.train``,
``trl`` backend) and prints steps/s, completion tokens/s and peak GPU memory.

    python benchmarks/gpu_training.py --tokenizer results/model/base --steps 4

The embedding and head use the tokenizer's vocabulary (the tiny one is small), so the 128k-token
head of the real Llama 3.1 is not in the figures; ``--hidden``/``--layers`` set the body size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_bench_inputs beside this file

from gpu_bench_inputs import identity_refinement_example


def build_model(tokenizer_dir: Path, output: Path, hidden: int, layers: int, intermediate: int) -> int:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    stop_ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|end_of_text|>")]
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=max(1, hidden // 256),
        head_dim=64,
        max_position_embeddings=16384,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return n_params


def build_dataset(model_dir: Path, path: Path, n_rows: int, side: int, seed: int) -> int:
    """Refinement prompts of random tasks (3 train pairs of side x side grids); returns mean prompt tokens."""
    import numpy as np

    from arc_pipeline.domain.tasks import Pair, Task
    from arc_pipeline.io import write_table
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.schemas import REFINEMENT_SCHEMA

    tokenizer = load_tokenizer(model_dir)
    program = "```python\ndef transform(input_grid):\n    return input_grid\n```"
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(n_rows):

        def g():
            return rng.integers(0, 10, size=(side, side)).astype(np.int8)

        task = Task(f"bench{index}", tuple(Pair(g(), g()) for _ in range(3)), (Pair(g(), g()),), "bench")
        rows.append(identity_refinement_example(task, tokenizer, program))
    write_table(rows, path, REFINEMENT_SCHEMA)
    return int(sum(r["prompt_tokens"] for r in rows) / len(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="folder with a Llama-3.1-style tokenizer")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--intermediate", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps (one prompt x num_generations each)")
    parser.add_argument("--num-generations", type=int, default=32)
    parser.add_argument("--gradient-accumulation-steps", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=1024)
    parser.add_argument("--grid-side", type=int, default=12, help="side of the random grids (prompt length)")
    parser.add_argument("--use-vllm", action="store_true", help="colocated vLLM generation")
    parser.add_argument("--no-gradient-checkpointing", action="store_true")
    args = parser.parse_args()

    import torch
    from transformers import TrainerCallback

    from arc_pipeline.training.config import TrainConfig
    from arc_pipeline.training.grpo import train

    if not torch.cuda.is_available():
        raise SystemExit("gpu_training: no CUDA GPU visible")

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    work = Path(tempfile.mkdtemp(prefix="gpu_training."))
    try:
        model_dir = work / "model"
        n_params = build_model(args.tokenizer, model_dir, args.hidden, args.layers, args.intermediate)
        dataset = work / "refine.parquet"
        prompt_tokens = build_dataset(model_dir, dataset, args.steps, args.grid_side, seed=0)
        config = TrainConfig(
            max_steps=args.steps,
            num_generations=args.num_generations,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            max_completion_length=args.max_completion_length,
            use_vllm=args.use_vllm,
            gradient_checkpointing=not args.no_gradient_checkpointing,
            report_to=["none"],
            save_steps=10_000,
        )
        timer = StepTimer()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        train(config, dataset, model_dir, work / "adapter", work / "metrics.parquet", callbacks=[timer])
        total = time.perf_counter() - started

        import polars as pl

        metrics = pl.read_parquet(work / "metrics.parquet")
        lengths = metrics.filter(pl.col("name") == "completions/mean_length").sort("step")["value"].to_list()
        completion_tokens = sum(lengths) * args.num_generations
        timed = timer.times[1:] or timer.times  # the first step includes warm-up
        per_step = sum(timed) / len(timed)
        rows = {
            "device": torch.cuda.get_device_name(0),
            "parameters (B)": f"{n_params / 1e9:.2f}",
            "prompt tokens (mean)": prompt_tokens,
            "generations x max completion": f"{args.num_generations} x {args.max_completion_length}",
            "vLLM": args.use_vllm,
            "steps": args.steps,
            "seconds per step (after the first)": f"{per_step:.2f}",
            "steps/s": f"{1 / per_step:.3f}",
            "completion tokens/s (whole run)": f"{completion_tokens / sum(timer.times):.0f}",
            "peak GPU memory (GiB)": f"{torch.cuda.max_memory_allocated() / 2**30:.1f}",
            "wall time incl. model load (s)": f"{total:.0f}",
        }
        width = max(len(key) for key in rows)
        print("| metric | value |\n|---|---|")
        for key, value in rows.items():
            print(f"| {key:<{width}} | {value} |")
        print(json.dumps({"step_times_s": [round(t, 2) for t in timer.times]}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
