"""Small tasks for the inference tests: a few ARC-like tasks and one too long for a 2k context.

(A uniquely named helper module: test folders are not packages, so it is imported by name.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.io import write_table
from arc_pipeline.schemas import TASKS_SCHEMA


def random_task(task_id: str, rng: np.random.Generator, n_train: int, n_test: int, size: int) -> Task:
    """A task whose output is the input flipped (so prompts look like ARC prompts)."""

    def pair() -> Pair:
        shape = (int(rng.integers(2, size + 1)), int(rng.integers(2, size + 1)))
        grid = rng.integers(0, 10, size=shape).astype(np.int8)
        return Pair(grid, np.flip(grid, axis=1).copy())

    return Task(task_id, tuple(pair() for _ in range(n_train)), tuple(pair() for _ in range(n_test)), "test")


def small_tasks(n: int = 3, seed: int = 0) -> list[Task]:
    rng = np.random.default_rng(seed)
    return [random_task(f"task_{i}", rng, n_train=2 + i % 3, n_test=1 + i % 2, size=5) for i in range(n)]


def medium_task(task_id: str = "task_medium", side: int = 17) -> Task:
    """Two 17 x 17 pairs: about 1.8k tokens, so a batch with it exceeds vLLM's CPU prefill chunk (4,096)."""
    rng = np.random.default_rng(2)
    grids = [rng.integers(0, 10, size=(side, side)).astype(np.int8) for _ in range(6)]
    return Task(task_id, (Pair(grids[0], grids[1]), Pair(grids[2], grids[3])), (Pair(grids[4], grids[5]),), "test")


def huge_task(task_id: str = "task_huge") -> Task:
    """Three 30 x 30 pairs: thousands of tokens, more than a 2,048-token context."""
    rng = np.random.default_rng(1)
    grids = [rng.integers(0, 10, size=(30, 30)).astype(np.int8) for _ in range(6)]
    return Task(task_id, (Pair(grids[0], grids[1]), Pair(grids[2], grids[3])), (Pair(grids[4], grids[5]),), "test")


def write_tasks(tasks: list[Task], path: Path) -> Path:
    return write_table([task.to_row() for task in tasks], path, TASKS_SCHEMA)


def build_untrained_tiny_model(tasks_path: Path, out: Path, vocab_size: int | None = None) -> Path:
    """The model stage's tiny Llama with random weights (no answer-format warm-up): for plumbing tests, and for
    tests that read only its tokenizer (which does not depend on the warm-up)."""
    import json

    from arc_pipeline.cli import main

    tiny: dict[str, int] = {"warmup_steps": 0} | ({"vocab_size": vocab_size} if vocab_size else {})
    config = json.dumps({"source": "tiny", "tiny": tiny})
    assert main(["model", "--tasks", str(tasks_path), "--output", str(out), "--config-json", config]) == 0
    return out


def random_lora_adapter(model_dir: Path, out: Path, **train_settings: object) -> Path:
    """A rank-1 rsLoRA adapter on every projection, as the train stage makes (``train_settings``: other
    TrainConfig fields, e.g. ``lora_r``), with non-zero weights."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from arc_pipeline.training.config import TrainConfig
    from arc_pipeline.training.trainer_args import lora_config

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(model_dir)), lora_config(TrainConfig(**train_settings))
    )
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.05)  # a fresh adapter has B = 0: no effect, nothing tested
    model.save_pretrained(str(out))
    return out
