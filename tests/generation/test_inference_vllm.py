"""Real vLLM on CPU with the tiny model: first-turn and refinement predictions, end to end.

Two engine starts for the whole module: one from this process, its worker in a process of its own (shared by
the tests through a module-scoped fixture), and one through the CLI in a subprocess, inside that process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from inference_helpers import build_untrained_tiny_model, huge_task, medium_task, small_tasks, write_tasks

from arc_pipeline.domain.augmentation import Augmentation
from arc_pipeline.domain.prompts import (
    first_turn_messages,
    prompt_hash,
    refinement_messages,
    render_first_turn,
    render_refinement,
)
from arc_pipeline.generation.engine import Engine, EngineConfig, SamplingConfig
from arc_pipeline.generation.requests import Provenance, first_turn_requests, refinement_requests
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.models.folder import load_tokenizer
from arc_pipeline.schemas import PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA
from arc_pipeline.stages.inference import predict
from arc_pipeline.task_files import read_tasks as load_tasks

pytestmark = pytest.mark.slow

MAX_MODEL_LEN = 2048
MAX_TOKENS = 24
ENGINE = dict(max_model_len=MAX_MODEL_LEN, kv_cache_memory_gib=0.0625, enforce_eager=True, max_num_seqs=16)
CLI_CONFIG = (
    '{"n_predictions": 4, "n": 2, "max_tokens": 24, "max_model_len": 2048, "kv_cache_memory_gib": 0.0625,'
    ' "enforce_eager": true, "max_num_seqs": 16, "seed": 11}'
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inference")


@pytest.fixture(scope="module")
def tasks_path(workdir: Path) -> Path:
    # the medium task's two prompts bring a round's prompts past vLLM's 4,096-token prefill chunk
    return write_tasks([*small_tasks(3), medium_task(), huge_task()], workdir / "tasks.parquet")


@pytest.fixture(scope="module")
def model_dir(workdir: Path, tasks_path: Path) -> Path:
    return build_untrained_tiny_model(tasks_path, workdir / "model")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Engine:
    # vLLM's worker in a process of its own, as vLLM runs it by default; the CLI's stage runs it in its own
    # process on CPU (engine_args.platform_environment), and test_cli_end_to_end compares the two
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
        engine = Engine(EngineConfig(model=str(model_dir), **ENGINE))
    with engine:
        yield engine


@pytest.fixture(scope="module")
def first_turn(engine: Engine, model_dir: Path, tasks_path: Path):
    sampling = SamplingConfig(n=2, max_tokens=MAX_TOKENS, seed=11)
    requests = first_turn_requests(load_tasks(tasks_path), load_tokenizer(model_dir), seed=11, rounds=2)
    rows, skipped = predict(engine, requests, sampling, Provenance("tiny", None, sampling))
    return requests, rows, skipped, sampling


def test_first_turn_rows(first_turn, workdir: Path, model_dir: Path, tasks_path: Path) -> None:
    _requests, rows, skipped, _sampling = first_turn
    path = write_table(rows, workdir / "predictions.parquet", PREDICTIONS_SCHEMA)  # every column valid
    frame = read_frame(path, PREDICTIONS_SCHEMA)
    counts = dict(frame.group_by("task_id").len().iter_rows())
    # 2 rounds x n=2 each; the huge task none
    assert counts == {task.task_id: 4 for task in [*small_tasks(3), medium_task()]}
    assert [r.key for r in skipped] == ["task_huge/t1/r0", "task_huge/t1/r1"]
    assert frame["prediction_id"].n_unique() == frame.height
    assert set(frame["finish_reason"]) <= {"stop", "length"}
    assert (frame["completion_tokens"] <= MAX_TOKENS).all() and (frame["completion_tokens"] > 0).all()
    truncated = frame.filter(pl.col("finish_reason") == "length")
    assert (truncated["completion_tokens"] == MAX_TOKENS).all()
    assert frame["seed"].n_unique() == frame.height  # every sample drawn with its own seed

    # replay: the recorded augmentation, train order and test index rebuild the exact prompt
    tokenizer = load_tokenizer(model_dir)
    tasks = {task.task_id: task for task in load_tasks(tasks_path)}
    for row in frame.iter_rows(named=True):
        augmented = Augmentation.from_row(row).apply_task(tasks[row["task_id"]])
        prompt = render_first_turn(tokenizer, first_turn_messages(augmented, row["train_order"], row["test_index"]))
        assert prompt_hash(prompt) == row["prompt_hash"]
        assert len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) == row["prompt_tokens"]
        assert prompt.startswith(tokenizer.bos_token) and not prompt.startswith(tokenizer.bos_token * 2)


def test_same_seed_same_samples_in_any_batch(first_turn, engine: Engine) -> None:
    """A request's samples depend on its key and the seed, not on what else is in the batch."""
    requests, rows, _, sampling = first_turn
    alone = [r for r in requests if r.task_id == "task_1"]
    again, _ = predict(engine, alone, sampling, Provenance("tiny", None, sampling))
    expected = {row["prediction_id"]: row["text"] for row in rows if row["task_id"] == "task_1"}
    assert {row["prediction_id"]: row["text"] for row in again} == expected
    reseeded, _ = predict(engine, alone, sampling.model_copy(update={"seed": 12}), Provenance("tiny", None, sampling))
    assert [row["text"] for row in reseeded] != list(expected.values())


def test_refinement_rows(first_turn, engine: Engine, model_dir: Path, tasks_path: Path) -> None:
    """Second turn: each refinement prompt sampled n times, turn 2, parent and augmentation copied."""
    _, rows, _, sampling = first_turn
    tokenizer = load_tokenizer(model_dir)
    tasks = {task.task_id: task for task in load_tasks(tasks_path)}
    refinements = []
    for parent in rows[:6]:  # task_0 (4 predictions) and task_1 (2)
        augmentation = Augmentation.from_row(parent)
        task = augmentation.apply_task(tasks[parent["task_id"]])
        wrong_outputs = [np.zeros_like(grid) for grid in task.train_outputs]
        prompt = render_refinement(
            tokenizer, refinement_messages(task, parent["test_index"], parent["text"], wrong_outputs)
        )
        refinements.append(
            {
                **task.to_row(),
                **augmentation.to_row(),
                "prediction_id": parent["prediction_id"],
                "test_index": parent["test_index"],
                "previous_text": parent["text"],
                "previous_train_outputs": [g.tolist() for g in wrong_outputs],
                "previous_train_correct_grids": 0.0,
                "previous_train_pixel_score": 0.0,
                "prompt": prompt,
                "prompt_tokens": len(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
            }
        )
    frame = pl.from_arrow(pa.Table.from_pylist(refinements, schema=REFINEMENT_SCHEMA))
    out, skipped = predict(engine, refinement_requests(frame), sampling, Provenance("tiny", "lora", sampling))
    assert not skipped and len(out) == 6 * sampling.n
    predictions = pl.DataFrame(out)
    assert set(predictions["turn"]) == {2}
    assert predictions.filter(pl.col("task_id") == "task_0")["round"].unique().sort().to_list() == [0, 1, 2, 3]
    for row in out:
        parent = next(r for r in refinements if r["prediction_id"] == row["parent_prediction_id"])
        assert row["prompt_hash"] == prompt_hash(parent["prompt"])
        assert row["prompt_tokens"] == parent["prompt_tokens"]
        assert (row["hflip"], row["rot90_k"], list(row["color_map"])) == (
            parent["hflip"],
            parent["rot90_k"],
            list(parent["color_map"]),
        )
        assert row["train_order"] == list(range(len(parent["train_inputs"])))
        assert row["prediction_id"].startswith(f"{row['task_id']}/t2/r{row['round']}/s")


def _cli(tasks_path: Path, model_dir: Path, output: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "arc_pipeline.cli",
        "inference",
        "--tasks",
        str(tasks_path),
        "--model",
        str(model_dir),
        "--output",
        str(output),
        "--config-json",
        CLI_CONFIG,
    ]


def test_cli_killed_half_way_leaves_no_output(workdir: Path, tasks_path: Path, model_dir: Path) -> None:
    output = workdir / "killed" / "predictions.parquet"
    process = subprocess.Popen(
        _cli(tasks_path, model_dir, output),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # killed as the engine starts, past reading the tasks and rendering the prompts: a fixed sleep raced the whole
    # stage on a fast machine (output written at 7.8 s, the kill at 8)
    assert process.stderr is not None
    started = next((line for line in process.stderr if "starting vLLM" in line), None)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert started is not None, "the stage ended without starting its engine"
    assert not output.exists()
    assert not output.parent.exists() or not any(output.parent.iterdir())  # no temporary file either


def test_cli_end_to_end(workdir: Path, tasks_path: Path, model_dir: Path, first_turn) -> None:
    output = workdir / "cli" / "predictions.parquet"
    environment = {key: value for key, value in os.environ.items() if key != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    result = subprocess.run(
        _cli(tasks_path, model_dir, output), capture_output=True, text=True, timeout=900, env=environment
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0)" in result.stderr  # the engine ran inside the stage's process
    assert "2 prompts too long, skipped: task_huge/t1/r0, task_huge/t1/r1" in result.stderr
    frame = read_frame(output, PREDICTIONS_SCHEMA)
    assert frame.height == 4 * 4
    assert frame["model"].unique().to_list() == ["tiny-llama-seed0"]
    assert frame["adapter"].null_count() == frame.height
    # another process, another engine (in that process, not in a worker process), the same seed: the same
    # prompts and the same samples
    in_process = {row["prediction_id"]: (row["prompt_hash"], row["text"]) for row in first_turn[1]}
    from_cli = {row["prediction_id"]: (row["prompt_hash"], row["text"]) for row in frame.iter_rows(named=True)}
    assert from_cli == in_process
