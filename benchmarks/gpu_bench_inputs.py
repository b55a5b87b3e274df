"""What the GPU GRPO benchmarks share: the benchmark's model and refinement prompts (``build_inputs``), and a vLLM
server's counters (``read_counters``).

benchmarks/gpu_grpo.py trains on the inputs and samples its variants' servers' counters while they run;
benchmarks/gpu_server.py sends the same prompts to a server and reads the same counters around each request.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any


def identity_refinement_example(task: Any, tokenizer: Any, program: str) -> dict[str, Any]:
    """``task``'s refinement prompt (REFINEMENT_SCHEMA row) after ``program``, an answer that returns its input:
    valid outputs, no train grid right. The GPU benchmarks train on such prompts of random tasks."""
    from arc_pipeline.refinement import refinement_example

    row = {
        "prediction_id": f"{task.task_id}/p",
        "task_id": task.task_id,
        "hflip": False,
        "rot90_k": 0,
        "color_map": list(range(10)),
        "test_index": 0,
        "text": program,
        "train_outputs": [grid.tolist() for grid in task.train_inputs],
        "train_correct_grids": 0.0,
        "train_pixel_score": 0.1,
    }
    return refinement_example(task, row, tokenizer)


def build_inputs(work: Path, grid_side: int, rows: int, logit_std: float | None = None) -> dict[str, Any]:
    """The random 8B model (no warm-up) and at least ``rows`` refinement prompts, once per work folder (again when
    an earlier call built fewer: a run that outlasts its prompts starts a second epoch, whose first step
    overlapped generation cannot prefetch). With ``logit_std`` the runs train and sample a copy whose LM head is
    peaked (``peaked_model``); a work folder holds runs of one head only."""
    done = work / "inputs.json"
    built = json.loads(done.read_text()) if done.is_file() else {}
    if built and built.get("logit_std") != logit_std:
        raise SystemExit(
            f"{work} holds runs with logit std {built.get('logit_std')} (None: the random head), not {logit_std}: "
            "use another --work"
        )
    if built.get("rows", 0) >= rows:
        return built
    import numpy as np

    from arc_pipeline.domain.tasks import Pair, Task
    from arc_pipeline.io import write_table
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.schemas import REFINEMENT_SCHEMA, TASKS_SCHEMA

    rng = np.random.default_rng(0)

    def grid() -> np.ndarray:
        return rng.integers(0, 10, size=(grid_side, grid_side)).astype(np.int8)

    tasks = [
        Task(f"bench{i}", tuple(Pair(grid(), grid()) for _ in range(3)), (Pair(grid(), grid()),), "bench")
        for i in range(rows)
    ]
    work.mkdir(parents=True, exist_ok=True)
    write_table([task.to_row() for task in tasks], work / "tasks.parquet", TASKS_SCHEMA)
    model_dir = work / "model"
    if not (model_dir / "config.json").is_file():
        # the model stage in a child process: the build's CUDA memory (the 8B weights, ~17 GiB on GPU 0) stays held
        # by the process that allocated it, and a variant's vLLM server that starts on GPU 0 at 0.9 of its memory
        # then fails; the stage also writes the folder whole or not at all
        config = json.dumps({"source": "random", "random": {"warmup_steps": 0}})
        stage = ["model", "--tasks", str(work / "tasks.parquet"), "--output", str(model_dir), "--config-json", config]
        subprocess.run([sys.executable, "-m", "arc_pipeline.cli", *stage], check=True)
    tokenizer = load_tokenizer(model_dir)
    program = "```python\nfrom common import *\n\ndef transform(input_grid):\n    return input_grid\n```"
    examples = [identity_refinement_example(task, tokenizer, program) for task in tasks]
    write_table(examples, work / "refinement.parquet", REFINEMENT_SCHEMA)
    inputs = {
        "model": str(model_dir if logit_std is None else peaked_model(model_dir, logit_std)),
        "logit_std": logit_std,
        "dataset": str(work / "refinement.parquet"),
        "prompt_tokens": float(np.mean([example["prompt_tokens"] for example in examples])),
        "rows": rows,
    }
    done.write_text(json.dumps(inputs))
    return inputs


def peaked_model(model_dir: Path, logit_std: float) -> Path:
    """A copy of the random model whose LM head gives a unit-RMS hidden state logits of standard deviation
    ``logit_std``: a trained model's kind of peaked next-token distribution. The random init's is about 1.3, nearly
    flat over 128,256 tokens (a 0.95 nucleus of ~82,000), the worst case of a top-p sampler (benchmarks/README.md,
    fourteenth lease). Only the head's safetensors file is rewritten; the other files are hard links. Built once,
    beside ``model_dir``, whole or not at all."""
    import math
    import os
    import shutil

    from safetensors.torch import load_file, save_file

    out = model_dir.with_name(f"{model_dir.name}-peaked-{logit_std:g}")
    if (out / "config.json").is_file():
        return out
    index = model_dir / "model.safetensors.index.json"
    shard = json.loads(index.read_text())["weight_map"]["lm_head.weight"] if index.is_file() else "model.safetensors"
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    for path in model_dir.iterdir():
        if path.is_file() and path.name != shard:
            os.link(path, partial / path.name)
    tensors = load_file(model_dir / shard)
    head = tensors["lm_head.weight"].float()
    # the final RMSNorm's scale is 1 in the random init, so a logit's spread is the head row's norm
    head *= logit_std / (head.std().item() * math.sqrt(head.shape[1]))
    tensors["lm_head.weight"] = head.to(tensors["lm_head.weight"].dtype)
    save_file(tensors, partial / shard, metadata={"format": "pt"})
    partial.rename(out)
    return out


# the server's counters read around each request (vLLM's Prometheus names; a missing one reads as absent)
COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_decode_time_seconds_sum",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:time_per_output_token_seconds_sum",
    "vllm:time_per_output_token_seconds_count",
    "vllm:num_preemptions_total",
)


def read_counters(url: str) -> dict[str, float]:
    import requests

    text = requests.get(f"{url}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"^(vllm:[a-z_:]+)(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if match and match.group(1) in COUNTERS:
            totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(3))
    return totals
