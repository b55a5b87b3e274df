"""The canary task family (arc_pipeline/domain/canary.py): tasks are what the canary claims they are."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from arc_pipeline.domain.canary import (
    CANARY_BODIES,
    CANARY_PROGRAMS,
    CanaryTasksConfig,
    canary_examples,
    canary_rows,
    canary_tasks,
)
from arc_pipeline.models.random import RandomModelConfig
from arc_pipeline.models.tiny import TinyModelConfig
from arc_pipeline.models.warmup import WARMUP_BODIES, answer_probabilities, warmup_answer, warmup_bodies
from arc_pipeline.sandbox import Sandbox, SandboxConfig, extract_code
from arc_pipeline.stages.barc_tasks import BarcTasksConfig, row_to_task


def test_exactly_one_family_program_solves_each_task() -> None:
    for name, pairs in canary_examples(CanaryTasksConfig(tasks=40, seed=3)):
        solvers = {
            candidate
            for candidate, program in CANARY_PROGRAMS.items()
            if all(np.array_equal(program.apply(grid), output) for grid, output in pairs)
        }
        assert solvers == {name}
        assert all(not np.array_equal(grid, output) or grid.shape != output.shape for grid, output in pairs)


def test_the_solutions_follow_the_configured_weights() -> None:
    config = CanaryTasksConfig(tasks=2000, programs={"rot180": 0.7, "flipud": 0.3}, seed=5)
    counts = Counter(name for name, _ in canary_examples(config))
    assert set(counts) == {"rot180", "flipud"}
    assert 0.66 < counts["rot180"] / 2000 < 0.74


def test_same_seed_same_tasks_other_seed_other_tasks() -> None:
    first = canary_rows(CanaryTasksConfig(tasks=5, seed=0))
    assert first == canary_rows(CanaryTasksConfig(tasks=5, seed=0))
    assert first != canary_rows(CanaryTasksConfig(tasks=5, seed=1))
    # the programs' order does not matter: the stage gets its config as JSON with sorted keys, a script as written
    weights = {"rot180": 0.7, "flipud": 0.1, "fliplr": 0.1, "transpose": 0.1}
    as_written = CanaryTasksConfig(tasks=40, programs=weights, seed=1)
    reordered = CanaryTasksConfig(tasks=40, programs=dict(sorted(weights.items())), seed=1)
    assert canary_rows(as_written) == canary_rows(reordered)


def test_rows_take_the_barc_path_and_hold_grids_only() -> None:
    rows = canary_rows(CanaryTasksConfig(tasks=10))
    for index, row in enumerate(rows):
        text = json.dumps(row)
        # nothing in a row names or writes the solution: the prompt is built from the grids alone
        assert not any(name in text for name in CANARY_PROGRAMS)
        assert not any(body.split("return ")[1] in text for body in CANARY_BODIES)
        task = row_to_task(index, row, BarcTasksConfig(min_examples=3))
        assert 2 <= len(task.train) <= 4 and len(task.test) == 1


def test_heldout_tasks_keep_the_last_pair_as_their_test() -> None:
    config = CanaryTasksConfig(tasks=3, examples=5, seed=9)
    tasks = canary_tasks(config, prefix="held")
    pairs = [pairs for _, pairs in canary_examples(config)]
    assert [task.task_id for task in tasks] == ["held_00000", "held_00001", "held_00002"]
    for task, examples in zip(tasks, pairs, strict=True):
        assert len(task.train) == 4
        assert np.array_equal(task.test[0].output, examples[-1][1])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("programs", {"rot90": 1.0}, "unknown"),
        ("programs", {"rot180": 0.0}, "must not all be 0"),
        ("min_side", 7, "min_side"),
    ],
)
def test_bad_settings_are_named(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CanaryTasksConfig(**{field: value, "max_side": 6})


def test_warmup_answers_choose_the_body_set() -> None:
    assert warmup_bodies("canary") == CANARY_BODIES
    assert warmup_bodies("trivial") == WARMUP_BODIES


def test_warmup_canary_weights_set_how_often_each_body_is_answered() -> None:
    assert answer_probabilities("canary", None) is None  # uniformly
    probabilities = answer_probabilities("canary", {"rot180": 1, "flipud": 3, "transpose": 4})
    by_body = dict(zip(warmup_bodies("canary"), probabilities, strict=True))
    assert by_body == {
        CANARY_PROGRAMS["rot180"].body: 0.125,
        CANARY_PROGRAMS["flipud"].body: 0.375,
        CANARY_PROGRAMS["fliplr"].body: 0.0,  # left out: never answered
        CANARY_PROGRAMS["transpose"].body: 0.5,
    }


@pytest.mark.parametrize("model_config", [TinyModelConfig, RandomModelConfig])
def test_unset_warmup_canary_weights_leave_the_model_rules_params_as_they_were(model_config: type) -> None:
    """The model rule's params are its config section's JSON: a new field that appears there, unset, would
    rerun the model and everything after it in every existing results folder."""
    assert "warmup_canary_weights" not in model_config(warmup_answers="canary").model_dump(mode="json")
    weights = {"rot180": 1.0, "flipud": 3.0}
    assert (
        model_config(warmup_answers="canary", warmup_canary_weights=weights).model_dump(mode="json")[
            "warmup_canary_weights"
        ]
        == weights
    )


@pytest.mark.parametrize("model_config", [TinyModelConfig, RandomModelConfig])
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"warmup_answers": "trivial", "warmup_canary_weights": {"rot180": 1}}, "only with warmup_answers: canary"),
        ({"warmup_answers": "canary", "warmup_canary_weights": {"rot90": 1}}, r"unknown programs \['rot90'\]"),
        ({"warmup_answers": "canary", "warmup_canary_weights": {"rot180": 0}}, "not all 0"),
        ({"warmup_answers": "canary", "warmup_canary_weights": {"rot180": -1, "flipud": 2}}, ">= 0"),
    ],
)
def test_bad_warmup_canary_weights_are_named(model_config: type, settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        model_config(**settings)


def test_each_body_computes_its_program_in_the_sandbox() -> None:
    """The warm-up teaches the bodies' text; the tasks are made with the programs' numpy functions: they agree."""
    grids = [pairs[0][0] for _, pairs in canary_examples(CanaryTasksConfig(tasks=6, seed=2))]
    with Sandbox(SandboxConfig(workers=1, timeout_s=5.0, memory_mb=1024)) as sandbox:
        for program in CANARY_PROGRAMS.values():
            result = sandbox.run(extract_code(warmup_answer(program.body)), grids)
            assert result.error_type is None, result
            for grid, output in zip(grids, result.outputs, strict=True):
                assert np.array_equal(np.asarray(output), program.apply(grid))
