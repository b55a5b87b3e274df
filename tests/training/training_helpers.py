"""Helpers shared by the training tests (imported by conftest and test modules)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from arc_pipeline.domain.tasks import Pair, Task

REFINE_TEXT = "I will recolor.\n```python\ndef transform(input_grid):\n    return input_grid\n```"


def grid(rows):
    return np.array(rows, dtype=np.int8)


def recolor_task(task_id: str = "recolor") -> Task:
    """Blue cells become red. The identity program gets only the second train pair right."""
    return Task(
        task_id,
        train=(
            Pair(grid([[1, 0], [0, 0]]), grid([[2, 0], [0, 0]])),
            Pair(grid([[0, 3], [0, 0]]), grid([[0, 3], [0, 0]])),
        ),
        test=(Pair(grid([[5, 1], [0, 0]]), grid([[5, 2], [0, 0]])),),
        source="test",
    )


def refinement_rows(tokenizer, n_rows: int) -> list[dict]:
    """``n_rows`` copies of the refinement example of the recolor task (identity previous answer)."""
    from arc_pipeline.refinement import refinement_example

    task = recolor_task()
    row = {
        "prediction_id": "recolor/t1/r0/s0",
        "task_id": task.task_id,
        "hflip": False,
        "rot90_k": 0,
        "color_map": list(range(10)),
        "test_index": 0,
        "text": REFINE_TEXT,
        "train_outputs": [g.tolist() for g in task.train_inputs],
        "train_correct_grids": 0.5,
        "train_pixel_score": 0.875,
    }
    example = refinement_example(task, row, tokenizer)
    return [dict(example, prediction_id=f"recolor/{i}") for i in range(n_rows)]


def grpo_trainer(train_config, tiny_model: Path, dataset_path: Path, run_dir: Path, reward):
    """``(trainer, dataset)``: TRL's GRPOTrainer as the stage builds it (LoRA, left padding, the stage's GRPO
    arguments) on the tiny model, with ``reward`` as its one reward function. Not trained."""
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.training.grpo import grpo_arguments, load_refinement_dataset, lora_config

    tokenizer = load_tokenizer(tiny_model)
    tokenizer.padding_side = "left"
    dataset, _ = load_refinement_dataset(dataset_path, tokenizer, train_config)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(tiny_model)),
        reward_funcs=[reward],
        args=grpo_arguments(train_config, run_dir, [1.0]),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(train_config),
    )
    return trainer, dataset


# ------------------------------------------------ the train stage as a process (preemption, data parallel)

#: Four short GRPO steps; no checkpoint of the run's own before the end, so the one a test finds after
#: SIGTERM is the preemption's.
SHORT_CPU_RUN = {
    "use_cpu": True,
    "bf16": False,
    "gradient_checkpointing": False,
    "report_to": ["none"],
    "num_generations": 4,
    "gradient_accumulation_steps": 2,
    "max_completion_length": 4,
    "max_seq_length": 2048,
    "max_steps": 4,
    "save_steps": 100,
    "logging_steps": 1,
    "learning_rate": 5e-3,
    "warmup_ratio": 0.0,
    "mask_truncated_completions": False,
    "execution_workers": 1,
}


def train_command(dataset: Path, model: Path, out: Path, config: dict, log_file: Path | None = None) -> list[str]:
    """``arc-pipeline train`` writing its adapter and metrics into ``out``."""
    logging = ["--log-file", str(log_file)] if log_file else []
    return [
        sys.executable,
        "-m",
        "arc_pipeline.cli",
        *logging,
        "train",
        *("--dataset", str(dataset), "--model", str(model)),
        *("--output", str(out / "adapter"), "--metrics", str(out / "metrics.parquet")),
        *("--config-json", json.dumps(config)),
    ]


def logged_steps(metrics: Path) -> int:
    """The last step in the metrics file so far; 0 before the file is whole."""
    try:
        return int(pl.read_parquet(metrics)["step"].max() or 0)
    except (OSError, pl.exceptions.PolarsError):
        return 0


def preempt_after_first_step(command: list[str], metrics: Path) -> tuple[int, str]:
    """Start ``command``, send SIGTERM (a batch system's preemption notice) once ``metrics`` holds a step;
    its exit status and stderr."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while logged_steps(metrics) < 1 and process.poll() is None:
        assert time.monotonic() < deadline, "training did not log its first step"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    return process.returncode, stderr


def result_of_engine_script(script: str, model: Path, folder: Path) -> dict:
    """Run ``script`` (Python that builds a vLLM engine on ``model``, its first argument, and prints one line
    ``RESULT <json>``) in a process of its own with the engine in that process, as TRL builds it; the JSON read."""
    import os

    path = folder / "engine_script.py"
    path.write_text(script)
    environment = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    result = subprocess.run(
        [sys.executable, str(path), str(model)], capture_output=True, text=True, timeout=600, env=environment
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])
