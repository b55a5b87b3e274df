"""Sampling requests (one prompt, sampled n times) and the prediction rows they turn into.

A first-turn request is one *round* of a task: a fresh augmentation, a shuffled train order and one
test input, all drawn from an rng seeded by ``(seed, task_id, turn, round)`` (docs/prompts.md).
A refinement request is one row of a refinement parquet, already rendered. Each sample of a request
becomes one row of ``PREDICTIONS_SCHEMA`` carrying everything needed to replay its prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from arc_pipeline.domain.augmentation import Augmentation
from arc_pipeline.domain.prompts import first_turn_messages, prompt_hash, render_first_turn
from arc_pipeline.domain.tasks import Task
from arc_pipeline.generation.engine import Generations, SamplingConfig
from arc_pipeline.generation.seeding import prediction_id, request_key, round_rng

log = logging.getLogger(__name__)

FIRST_TURN = 1
REFINEMENT_TURN = 2


@dataclass(frozen=True)
class Request:
    """One prompt to sample ``n`` times, with what is needed to replay it."""

    task_id: str
    turn: int
    round: int
    augmentation: Augmentation
    train_order: tuple[int, ...]
    test_index: int
    prompt: str
    parent_prediction_id: str | None = None

    @property
    def key(self) -> str:
        """Names the request for its sampling seed and prefixes its prediction ids."""
        return request_key(self.task_id, self.turn, self.round)


@dataclass(frozen=True)
class RoundChoice:
    augmentation: Augmentation
    train_order: tuple[int, ...]
    test_index: int


def choose_round(task: Task, seed: int, turn: int, round_index: int) -> RoundChoice:
    """The random choices of one round; a function of (seed, task id, turn, round) only."""
    rng = round_rng(seed, task.task_id, turn, round_index)
    augmentation = Augmentation.random(rng)
    train_order = tuple(int(i) for i in rng.permutation(len(task.train)))
    test_index = int(rng.integers(len(task.test)))
    return RoundChoice(augmentation, train_order, test_index)


def render_round(tokenizer: Any, task: Task, choice: RoundChoice) -> str:
    """The first-turn prompt of a round: the augmented task, rendered with the model's chat template."""
    augmented = choice.augmentation.apply_task(task)
    return render_first_turn(tokenizer, first_turn_messages(augmented, choice.train_order, choice.test_index))


def n_rounds(n_predictions: int, n: int) -> int:
    """Rounds per task: each round samples one prompt ``n`` times."""
    if n_predictions <= 0 or n <= 0 or n_predictions % n:
        raise ValueError(f"n_predictions ({n_predictions}) must be a positive multiple of n ({n})")
    return n_predictions // n


def first_turn_requests(
    tasks: Iterable[Task], tokenizer: Any, seed: int, rounds: int, turn: int = FIRST_TURN
) -> list[Request]:
    """``rounds`` requests per task, round-major within a task (task order kept)."""
    requests = []
    for task in tasks:
        if not task.train or not task.test:
            raise ValueError(
                f"task {task.task_id}: needs train and test pairs ({len(task.train)} train, {len(task.test)} test)"
            )
        for round_index in range(rounds):
            choice = choose_round(task, seed, turn, round_index)
            prompt = render_round(tokenizer, task, choice)
            requests.append(
                Request(
                    task.task_id, turn, round_index, choice.augmentation, choice.train_order, choice.test_index, prompt
                )
            )
    return requests


def refinement_requests(refinements: pl.DataFrame, turn: int = REFINEMENT_TURN) -> list[Request]:
    """One request per row of a ``REFINEMENT_SCHEMA`` frame; ``round`` counts a task's rows in file order."""
    counters: dict[str, int] = {}
    requests = []
    for row in refinements.iter_rows(named=True):
        task_id = row["task_id"]
        round_index = counters.get(task_id, 0)
        counters[task_id] = round_index + 1
        try:
            augmentation = Augmentation.from_row(row)
        except ValueError as error:
            raise ValueError(f"refinement of {row['prediction_id']}: bad augmentation ({error})") from None
        requests.append(
            Request(
                task_id=task_id,
                turn=turn,
                round=round_index,
                augmentation=augmentation,
                train_order=tuple(range(len(row["train_inputs"]))),  # refinement prompts are unshuffled
                test_index=int(row["test_index"]),
                prompt=row["prompt"],
                parent_prediction_id=row["prediction_id"],
            )
        )
    return requests


@dataclass(frozen=True)
class Provenance:
    model: str
    adapter: str | None
    sampling: SamplingConfig


def prediction_rows(requests: Sequence[Request], generations: Generations, provenance: Provenance) -> list[dict]:
    """One ``PREDICTIONS_SCHEMA`` row per completion (skipped requests give none)."""
    if len(requests) != len(generations.completions):
        raise ValueError(f"{len(generations.completions)} generations for {len(requests)} requests")
    sampling = provenance.sampling
    rows = []
    for request, completions, n_prompt_tokens in zip(
        requests, generations.completions, generations.prompt_tokens, strict=True
    ):
        digest = prompt_hash(request.prompt)
        for sample_index, completion in enumerate(completions):
            rows.append(
                {
                    "prediction_id": prediction_id(request.task_id, request.turn, request.round, sample_index),
                    "task_id": request.task_id,
                    "turn": request.turn,
                    "round": request.round,
                    "sample_index": sample_index,
                    **request.augmentation.to_row(),
                    "train_order": list(request.train_order),
                    "test_index": request.test_index,
                    "parent_prediction_id": request.parent_prediction_id,
                    "prompt_hash": digest,
                    "prompt_tokens": n_prompt_tokens,
                    "text": completion.text,
                    "completion_tokens": completion.completion_tokens,
                    "finish_reason": completion.finish_reason,
                    "model": provenance.model,
                    "adapter": provenance.adapter,
                    "temperature": sampling.temperature,
                    "top_p": sampling.top_p,
                    "max_tokens": sampling.max_tokens,
                    # the seed this very sample was drawn with (-1: unseeded sampling)
                    "seed": -1 if completion.seed is None else completion.seed,
                }
            )
    return rows
