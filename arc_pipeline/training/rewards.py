"""TRL reward functions: run each completion's program on its task and score it (docs/scoring.md).

A reward function is called by ``GRPOTrainer`` once per generation batch with the prompts, the
decoded completions, their token ids and every other dataset column repeated per completion (here
the augmented task grids of the refinement dataset). Programs run in a shared :class:`Sandbox`
(never in the trainer's process). The published run's extra metrics (docs/scoring.md) go
through TRL's official ``log_metric``
callback that the trainer passes to reward functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from arc_pipeline.sandbox.program import extract_code
from arc_pipeline.sandbox.types import PARSING_CODE_FAILED
from arc_pipeline.scoring.rewards import compute_reward
from arc_pipeline.scoring.rules import apply_rules, check_rules
from arc_pipeline.training.completion_stats import CompletionOutcome, batch_metrics

log = logging.getLogger(__name__)


def _grids(value: Any) -> list[np.ndarray]:
    return [np.asarray(grid, dtype=np.int8) for grid in value]


def is_truncated(token_ids: Sequence[int] | None, stop_token_ids: Iterable[int]) -> bool:
    """TRL's definition: a completion is truncated unless its last token is a stop (or pad) token."""
    if token_ids is None:
        return False
    return len(token_ids) == 0 or int(token_ids[-1]) not in set(stop_token_ids)


class ArcReward:
    """Reward of each completion's program on the augmented task of its dataset row.

    ``sandbox`` runs ``(code, inputs)`` jobs (``run_many``); the reward is ``compute_reward(name,
    outputs, train_truth, test_truth)`` over the train then test inputs. A truncated completion gets
    ``truncated_reward`` instead when that is set. ``rules``: the execution rules
    (:mod:`arc_pipeline.scoring.rules`); the published RL rewards were computed under ``published``.
    """

    def __init__(
        self,
        reward_name: str,
        sandbox: Any,
        stop_token_ids: Iterable[int],
        truncated_reward: float | None = None,
        rules: str = "strict",
    ) -> None:
        self.__name__ = reward_name  # TRL logs rewards/<__name__>/mean
        self.rules = check_rules(rules)
        self.reward_name = reward_name
        self.sandbox = sandbox
        self.stop_token_ids = frozenset(int(i) for i in stop_token_ids)
        self.truncated_reward = truncated_reward
        self._warned_no_log_metric = False

    def score(
        self,
        completions: Sequence[str],
        train_inputs: Sequence[Any],
        train_outputs: Sequence[Any],
        test_inputs: Sequence[Any],
        test_outputs: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        task_ids: Sequence[str] | None = None,
    ) -> list[CompletionOutcome]:
        """Execute and score every completion; the per-completion outcome (reward, truncation, error)."""
        n = len(completions)
        programs = []
        jobs, job_rows = [], []
        for index, text in enumerate(completions):
            inputs = _grids(train_inputs[index]) + _grids(test_inputs[index])
            program = apply_rules(extract_code(text), len(inputs), self.rules)
            programs.append(program)
            if program.run is not None:
                jobs.append((program.run, inputs))
                job_rows.append(index)
        results = self.sandbox.run_many(jobs) if jobs else []
        by_row = dict(zip(job_rows, results, strict=True))
        outcomes = []
        for index in range(n):
            ids = completion_ids[index] if completion_ids is not None else None
            truncated = is_truncated(ids, self.stop_token_ids)
            result = by_row.get(index)
            if result is None:
                error_type, outputs = programs[index].error_type or PARSING_CODE_FAILED, None
            else:
                error_type, outputs = result.error_type, result.outputs if result.error_type is None else None
            test_truth = None if test_outputs[index] is None else _grids(test_outputs[index])
            reward = compute_reward(self.reward_name, outputs, _grids(train_outputs[index]), test_truth)
            if truncated and self.truncated_reward is not None:
                reward = float(self.truncated_reward)
            task_id = None if task_ids is None else task_ids[index]
            outcomes.append(
                CompletionOutcome(
                    reward=reward, truncated=truncated, error_type=error_type, token_ids=ids or [], task_id=task_id
                )
            )
        return outcomes

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        completion_ids: Sequence[Sequence[int]] | None = None,
        *,
        train_inputs: Sequence[Any],
        train_outputs: Sequence[Any],
        test_inputs: Sequence[Any],
        test_outputs: Sequence[Any],
        log_metric: Callable[[str, float], None] | None = None,
        task_id: Sequence[str] | None = None,
        **_: Any,
    ) -> list[float]:
        outcomes = self.score(
            completions, train_inputs, train_outputs, test_inputs, test_outputs, completion_ids, task_id
        )
        self.log_batch(outcomes, log_metric)
        return [outcome.reward for outcome in outcomes]

    def log_batch(self, outcomes: Sequence[CompletionOutcome], log_metric: Callable[[str, float], None] | None) -> None:
        """Send the batch's extra metrics through TRL's ``log_metric`` (averaged per logging window)."""
        metrics = batch_metrics(outcomes)
        if log_metric is None:
            if not self._warned_no_log_metric:
                log.warning("this TRL version passes no log_metric to reward functions: extra metrics not logged")
                self._warned_no_log_metric = True
            return
        for name, value in metrics.items():
            log_metric(name, float(value))


def soft_overlong_penalty(max_completion_length: int, cache_tokens: int) -> Callable[..., list[float]]:
    """TRL's DAPO soft overlong punishment (0 until ``max - cache`` tokens, then down to -1)."""
    from trl.rewards import get_soft_overlong_punishment

    return get_soft_overlong_punishment(max_completion_len=max_completion_length, soft_punish_cache=cache_tokens)
