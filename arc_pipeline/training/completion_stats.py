"""Per-batch statistics of completions that the published run logged beyond TRL's own (docs/defaults.md).

They were added to diagnose RL collapse (docs/scoring.md): long truncated outputs, repeated n-grams,
gibberish. Pure functions over rewards, token ids and error types, so they are tested without TRL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from arc_pipeline.sandbox.types import MEMORY
from arc_pipeline.scoring.rewards import MAX_REWARD


@dataclass(frozen=True)
class CompletionOutcome:
    """What one completion achieved: its reward, whether it was cut off, and its execution error."""

    reward: float
    truncated: bool
    error_type: str | None
    token_ids: Sequence[int]
    task_id: str | None = None

    @property
    def solved(self) -> bool:
        return self.reward >= MAX_REWARD


def unique_token_ratio(token_ids: Sequence[int]) -> float:
    """Distinct tokens / tokens (1 = no token repeats; low values mean repetitive text)."""
    return len(set(token_ids)) / len(token_ids) if token_ids else 1.0


def max_ngram_count(token_ids: Sequence[int], n: int) -> int:
    """How often the most frequent n-gram of token ids occurs (0 for completions shorter than n)."""
    if len(token_ids) < n:
        return 0
    counts = Counter(tuple(token_ids[i : i + n]) for i in range(len(token_ids) - n + 1))
    return max(counts.values())


def unique_ngram_ratio(token_ids: Sequence[int], n: int) -> float:
    """Distinct n-grams / n-grams (0 when the completion is shorter than n, as the researchers logged it)."""
    total = len(token_ids) - n + 1
    if total <= 0:
        return 0.0
    return len({tuple(token_ids[i : i + n]) for i in range(total)}) / total


def max_ngram_share(token_ids: Sequence[int], n: int) -> float:
    """Frequency of the most repeated n-gram: its count / the completion's n-grams (0 if shorter than n)."""
    total = len(token_ids) - n + 1
    return max_ngram_count(token_ids, n) / total if total > 0 else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def batch_metrics(outcomes: Sequence[CompletionOutcome]) -> dict[str, float]:
    """The published run's extra metrics for one generation batch, keyed by their logged name.

    Group metrics (rewards of truncated completions, length of solved ones, n-gram counts per group)
    are left out when the group is empty, so they average only over batches that had such completions.
    """
    if not outcomes:
        return {}
    rewards = [o.reward for o in outcomes]
    truncated = [o for o in outcomes if o.truncated]
    finished = [o for o in outcomes if not o.truncated]
    solved = [o for o in outcomes if o.solved]
    metrics = {
        "arc/reward_max": max(rewards),
        "arc/reward_min": min(rewards),
        "arc/truncated_share": len(truncated) / len(outcomes),
        "arc/solved_share": len(solved) / len(outcomes),
        "arc/memory_error_share": sum(o.error_type == MEMORY for o in outcomes) / len(outcomes),
        "arc/valid_outputs_share": sum(o.error_type is None for o in outcomes) / len(outcomes),
    }
    # "truncated" here is TRL's: no stop token at the end (is_truncated in rewards.py). The published run
    # counted length >= max_completion_length instead, which misses completions cut by max_seq_length.
    if truncated:
        metrics["arc/truncated_reward_mean"] = _mean([o.reward for o in truncated])
        metrics["arc/truncated_reward_max"] = max(o.reward for o in truncated)
    if finished:
        metrics["arc/non_truncated_reward_mean"] = _mean([o.reward for o in finished])
        metrics["arc/non_truncated_reward_max"] = max(o.reward for o in finished)
    if solved:
        metrics["arc/solved_length_mean"] = _mean([len(o.token_ids) for o in solved])
        metrics["arc/solved_length_max"] = max(len(o.token_ids) for o in solved)
    # share of the batch's tasks with at least one solving completion (one task per step with task_repeats)
    tasks = {o.task_id for o in outcomes}
    metrics["arc/solved_in_step"] = len({o.task_id for o in solved}) / len(tasks)
    for name, group in (("truncated", truncated), ("non_truncated", finished)):
        if not group:
            continue
        metrics[f"arc/unique_token_ratio/{name}"] = _mean([unique_token_ratio(o.token_ids) for o in group])
        for n in (3, 4):
            metrics[f"arc/max_{n}gram_count/{name}"] = _mean([max_ngram_count(o.token_ids, n) for o in group])
            metrics[f"arc/max_{n}gram_share/{name}"] = _mean([max_ngram_share(o.token_ids, n) for o in group])
            metrics[f"arc/unique_{n}gram_ratio/{name}"] = _mean([unique_ngram_ratio(o.token_ids, n) for o in group])
    return metrics
