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


def build_inputs(work: Path, grid_side: int, rows: int) -> dict[str, Any]:
    """The random 8B model (no warm-up) and at least ``rows`` refinement prompts, once per work folder (again when
    an earlier call built fewer: a run that outlasts its prompts starts a second epoch, whose first step
    overlapped generation cannot prefetch)."""
    done = work / "inputs.json"
    built = json.loads(done.read_text()) if done.is_file() else {}
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
        "model": str(model_dir),
        "dataset": str(work / "refinement.parquet"),
        "prompt_tokens": float(np.mean([example["prompt_tokens"] for example in examples])),
        "rows": rows,
    }
    done.write_text(json.dumps(inputs))
    return inputs


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
