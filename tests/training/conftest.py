"""Fixtures of the training tests: a tiny random Llama and a refinement dataset built from a real prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from training_helpers import recolor_task, refinement_rows


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from arc_pipeline.cli import main as cli_main
    from arc_pipeline.io import write_table
    from arc_pipeline.schemas import TASKS_SCHEMA

    folder = tmp_path_factory.mktemp("tiny_model")
    tasks = folder / "tasks.parquet"
    write_table([recolor_task().to_row()], tasks, TASKS_SCHEMA)
    output = folder / "model"
    # random weights: the warm-up (45 s of one core) teaches answers that no test here reads; the training tests
    # give their own rewards, and the canary (tests/workflow/test_canary.py) learns from a warmed-up model
    config = {"source": "tiny", "tiny": {"vocab_size": 600, "seed": 0, "warmup_steps": 0}}
    cli_main(["model", "--tasks", str(tasks), "--output", str(output), "--config-json", json.dumps(config)])
    return output


@pytest.fixture
def refinement_dataset(tiny_model, tmp_path):
    """Factory: write a refinement parquet of ``n_rows`` rows and return its path."""
    from arc_pipeline.io import write_table
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.schemas import REFINEMENT_SCHEMA

    tokenizer = load_tokenizer(tiny_model)

    def make(n_rows: int, name: str = "refine.parquet") -> Path:
        path = tmp_path / name
        write_table(refinement_rows(tokenizer, n_rows), path, REFINEMENT_SCHEMA)
        return path

    return make
