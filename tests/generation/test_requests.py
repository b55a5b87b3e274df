"""Rounds, seeding, augmentation recording and prediction rows, without an engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from inference_helpers import small_tasks

from arc_pipeline.domain.augmentation import Augmentation
from arc_pipeline.domain.grids import grid_to_text
from arc_pipeline.domain.prompts import prompt_hash
from arc_pipeline.generation.engine import Completion, Generations, SamplingConfig
from arc_pipeline.generation.requests import (
    Provenance,
    choose_round,
    first_turn_requests,
    n_rounds,
    prediction_rows,
    refinement_requests,
    render_round,
)
from arc_pipeline.generation.seeding import SEED_BITS, derive_seed, prediction_id
from arc_pipeline.io import write_table
from arc_pipeline.schemas import PREDICTIONS_SCHEMA
from arc_pipeline.stages.inference import InferenceConfig


class ChatTokenizer:
    """A stand-in for the model's chat template: joins role-tagged contents (enough to check replay)."""

    def apply_chat_template(self, messages, tokenize=False, continue_final_message=False, add_generation_prompt=False):
        assert not tokenize and continue_final_message and not add_generation_prompt
        return "".join(f"<{m['role']}>{m['content']}" for m in messages)


def test_n_rounds_divides() -> None:
    assert n_rounds(8, 8) == 1
    assert n_rounds(128, 8) == 16
    unseeded = InferenceConfig.model_validate({"seed": None})
    assert unseeded.sampling().seed is None and unseeded.engine("m", None).seed == 0
    with pytest.raises(ValueError, match="multiple of n"):
        n_rounds(8, 3)
    with pytest.raises(ValueError):
        n_rounds(0, 8)


def test_derive_seed_is_stable_and_spread() -> None:
    assert derive_seed(0, "a/t1/r0") == derive_seed(0, "a/t1/r0")
    seeds = {derive_seed(seed, f"task/t1/r{r}") for seed in range(3) for r in range(50)}
    assert len(seeds) == 150
    assert all(0 <= s < 2**SEED_BITS for s in seeds)
    # neighbouring keys must not give neighbouring seeds (vLLM uses seed + sample index)
    a, b = derive_seed(0, "x/t1/r0"), derive_seed(0, "x/t1/r1")
    assert abs(a - b) > 1000


def test_round_choice_depends_only_on_seed_task_turn_round() -> None:
    task_a, task_b = small_tasks(2)
    first = choose_round(task_a, seed=7, turn=1, round_index=3)
    assert first == choose_round(task_a, seed=7, turn=1, round_index=3)
    # drawing rounds of other tasks in between changes nothing
    choose_round(task_b, seed=7, turn=1, round_index=3)
    assert first == choose_round(task_a, seed=7, turn=1, round_index=3)
    others = {choose_round(task_a, seed=s, turn=1, round_index=r) for s in range(4) for r in range(4)}
    assert len(others) > 8  # rounds really differ
    assert sorted(first.train_order) == list(range(len(task_a.train)))
    assert 0 <= first.test_index < len(task_a.test)


def test_first_turn_requests_replay() -> None:
    tasks = small_tasks(3)
    tokenizer = ChatTokenizer()
    requests = first_turn_requests(tasks, tokenizer, seed=5, rounds=2)
    assert [(r.task_id, r.round) for r in requests] == [(t.task_id, k) for t in tasks for k in range(2)]
    shard = first_turn_requests(tasks[1:2], tokenizer, seed=5, rounds=2)
    assert shard == requests[2:4]  # a shard reproduces whatever else is in it
    by_id = {task.task_id: task for task in tasks}
    for request in requests:
        # the recorded parameters rebuild the prompt exactly
        choice = choose_round(by_id[request.task_id], 5, request.turn, request.round)
        assert render_round(tokenizer, by_id[request.task_id], choice) == request.prompt
        augmented = request.augmentation.apply_task(by_id[request.task_id])
        first_shown = augmented.train[request.train_order[0]].input
        assert request.prompt.split("Example 1\nInput:\n", 1)[1].startswith(grid_to_text(first_shown) + "\n\n")
        assert grid_to_text(augmented.test[request.test_index].input) in request.prompt


def _generations(requests, n, skipped=()):
    completions = [
        []
        if i in skipped
        else [Completion(f"text {i}.{s}", 10 + s, "length" if s else "stop", 1000 * i + s) for s in range(n)]
        for i in range(len(requests))
    ]
    return Generations(completions, [100 + i for i in range(len(requests))], list(skipped))


def test_prediction_rows_fill_the_schema(tmp_path: Path) -> None:
    tasks = small_tasks(2)
    requests = first_turn_requests(tasks, ChatTokenizer(), seed=0, rounds=2)
    sampling = SamplingConfig(n=3, max_tokens=64)
    rows = prediction_rows(requests, _generations(requests, 3, skipped={1}), Provenance("tiny", "adapters/a", sampling))
    assert len(rows) == 3 * 3  # request 1 skipped
    write_table(rows, tmp_path / "p.parquet", PREDICTIONS_SCHEMA)  # validates every column
    frame = pl.read_parquet(tmp_path / "p.parquet")
    assert frame["prediction_id"].n_unique() == len(rows)
    first = rows[0]
    assert first["prediction_id"] == prediction_id(tasks[0].task_id, 1, 0, 0) == f"{tasks[0].task_id}/t1/r0/s0"
    assert first["prompt_hash"] == prompt_hash(requests[0].prompt)
    assert Augmentation.from_row(first) == requests[0].augmentation
    assert first["adapter"] == "adapters/a" and first["max_tokens"] == 64 and first["parent_prediction_id"] is None
    assert [row["sample_index"] for row in rows[:3]] == [0, 1, 2]
    assert {row["finish_reason"] for row in rows} == {"stop", "length"}
    assert "/r1/" not in " ".join(r["prediction_id"] for r in rows if r["task_id"] == tasks[0].task_id)


def test_refinement_requests_count_rounds_per_task() -> None:
    aug = Augmentation.random(np.random.default_rng(0)).to_row()
    grid = [[1, 2], [3, 4]]
    rows = [
        {
            "task_id": task_id,
            "prediction_id": f"{task_id}/t1/r0/s{k}",
            **aug,
            "train_inputs": [grid] * 3,
            "test_index": 0,
            "prompt": f"prompt {task_id} {k}",
        }
        for task_id, k in [("a", 0), ("b", 0), ("a", 1), ("a", 2)]
    ]
    requests = refinement_requests(pl.DataFrame(rows))
    assert [(r.task_id, r.round) for r in requests] == [("a", 0), ("b", 0), ("a", 1), ("a", 2)]
    assert all(r.turn == 2 and r.train_order == (0, 1, 2) for r in requests)
    assert requests[2].parent_prediction_id == "a/t1/r0/s1"
    assert requests[2].key == "a/t2/r1"
    assert requests[0].augmentation == Augmentation.from_row(aug)


def test_inference_config_slices() -> None:
    config = InferenceConfig.model_validate({"n": 4, "seed": 3, "max_model_len": 2048, "n_predictions": 8})
    assert config.sampling() == SamplingConfig(n=4, seed=3)
    engine = config.engine("models/tiny", None)
    assert engine.max_model_len == 2048 and engine.seed == 3 and engine.model == "models/tiny"
    with pytest.raises(ValueError):
        InferenceConfig.model_validate({"max_token": 10})  # typos are refused
    unseeded = InferenceConfig.model_validate({"seed": None})
    assert unseeded.sampling().seed is None and unseeded.engine("m", None).seed == 0
    with pytest.raises(ValueError, match="multiple of n"):
        InferenceConfig.model_validate({"n": 3})  # 8 predictions are not whole rounds of 3
