"""Online multi-turn GRPO (``TrainConfig.online_multi_turn``): both turns sampled by the current policy.

The published run trained the second turn only, on fixed first turns. Here TRL's ``rollout_func`` plays the
whole episode for each dataset row, with the policy being trained:

1. the first-turn prompt (docs/prompts.md, train pairs unshuffled) is rendered from the
   row's augmented task, and the first answer is sampled;
2. its program runs on the train inputs in the shared sandbox, under the same execution rules as the
   reward (``train.execution_rules``, arc_pipeline/scoring/rules.py);
3. the feedback user turn is built exactly as the refinement template does (docs/prompts.md);
4. the second answer is sampled after ``first prompt + first answer + feedback``.

The completion TRL trains on is ``first answer + feedback tokens + second answer``, with
``env_mask`` 0 over the feedback tokens: the loss covers both answers, never the feedback.
``max_completion_length`` limits each answer, so an episode can be about twice as long.

The episode ends after the first turn (completion = first answer, no feedback) when the first
answer cannot be refined: it was truncated, has no program, the program failed or gave no valid
output on some train input (the template needs every output; docs/scoring.md: only valid
predictions), or it already solves every train pair (docs/scoring.md: only wrong ones are refined, and
"Your first solution was not correct" would be false). The reward is always computed on the
episode's *last* answer (:class:`FinalTurnReward`): the second answer when there is one, else the
first, so an invalid first answer scores 0 and a first answer right on train keeps its reward.

The rollout works with or without vLLM: it samples through the trainer's own generation path
(``GRPOTrainer._generate_single_turn``, one sample per prompt; TRL already repeats each prompt
``num_generations`` times), which is ``model.generate`` on the CPU and colocated vLLM on a GPU.
That method is private to TRL 1.x: a TRL upgrade may need this module adapted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arc_pipeline.domain.prompts import (
    first_turn_messages,
    refinement_messages,
    render_first_turn,
    render_refinement,
)
from arc_pipeline.domain.tasks import Task
from arc_pipeline.models.tokens import adds_bos
from arc_pipeline.sandbox.program import extract_code
from arc_pipeline.scoring.rules import apply_rules, check_rules

log = logging.getLogger(__name__)

# Extra rollout fields TRL forwards to reward functions (one value per completion).
FINAL_TEXT = "final_completion"
FINAL_IDS = "final_completion_ids"
TURNS = "turns"


@dataclass
class Episode:
    """One row's episode while it is being played."""

    prompt_ids: list[int]
    first_ids: list[int]
    first_logps: list[float] | None
    feedback_ids: list[int] | None = None
    second_ids: list[int] | None = None
    second_logps: list[float] | None = None

    @property
    def completion_ids(self) -> list[int]:
        if self.second_ids is None:
            return list(self.first_ids)
        return [*self.first_ids, *self.feedback_ids, *self.second_ids]

    @property
    def env_mask(self) -> list[int]:
        if self.second_ids is None:
            return [1] * len(self.first_ids)
        return [1] * len(self.first_ids) + [0] * len(self.feedback_ids) + [1] * len(self.second_ids)

    @property
    def logprobs(self) -> list[float] | None:
        if self.first_logps is None:
            return None
        if self.second_ids is None:
            return list(self.first_logps)
        return [*self.first_logps, *([0.0] * len(self.feedback_ids)), *self.second_logps]

    @property
    def final_ids(self) -> list[int]:
        return list(self.first_ids if self.second_ids is None else self.second_ids)


def _strip_bos(tokenizer: Any, text: str) -> str:
    """TRL tokenizes standard prompts with ``tokenizer(text)``, which adds BOS again (as in grpo.py)."""
    if adds_bos(tokenizer) and text.startswith(tokenizer.bos_token):
        return text[len(tokenizer.bos_token) :]
    return text


class OnlineRollout:
    """TRL ``rollout_func``: ``rollout(prompts, trainer) -> {prompt_ids, completion_ids, logprobs, env_mask, ...}``.

    ``prompts`` are the refinement dataset's prompts (one per completion); the row behind each is
    looked up in ``trainer.train_dataset`` by its prompt text (equal prompts mean the same
    augmented task). ``sandbox`` runs the first answers (``run_many``) under ``rules``, which must be
    the reward's rules (and the sandbox configured for them: ``scoring.rules.max_output_side``).
    """

    def __init__(self, sandbox: Any, stop_token_ids: Sequence[int], rules: str = "strict") -> None:
        self.sandbox = sandbox
        self.stop_token_ids = frozenset(int(i) for i in stop_token_ids)
        self.rules = check_rules(rules)
        self._rows: dict[str, int] | None = None

    # ---- helpers

    def _row(self, trainer: Any, prompt: str) -> dict[str, Any]:
        if self._rows is None:
            self._rows = {text: index for index, text in enumerate(trainer.train_dataset["prompt"])}
        index = self._rows.get(prompt)
        if index is None:
            raise KeyError(f"online rollout: prompt not found in the training dataset: {prompt[:80]!r}...")
        return trainer.train_dataset[index]

    def _sample(self, trainer: Any, prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        """One sample per prompt with the current policy (model.generate or colocated vLLM)."""
        return trainer._generate_single_turn(prompt_ids, None, {}, 1)

    def feedback_ids(
        self, tokenizer: Any, first_prompt: str, first_text: str, first_ids: Sequence[int], refinement_prompt: str
    ) -> list[int]:
        """Tokens between the end of the first answer and the second answer: the refinement prompt's tail.

        The refinement prompt is ``first prompt + first answer + end of turn + feedback user turn +
        assistant header``, up to whitespace: Llama-style chat templates trim message content, so the
        first-turn prompt ends without the assistant prefix's final newline, and the answer's own
        leading/trailing whitespace moves or disappears. The episode keeps the answer's tokens as
        sampled and takes the feedback from the end of the answer's text. The first answer's own
        stop token already stands for the end of turn.
        """
        if not refinement_prompt.startswith(first_prompt):
            raise ValueError("online rollout: the refinement prompt does not extend the first-turn prompt")
        rest = refinement_prompt[len(first_prompt) :]
        answer = first_text.strip()
        start = rest.find(answer)
        if start < 0 or rest[:start].strip():
            raise ValueError("online rollout: the first answer is not where the refinement prompt puts it")
        tail = rest[start + len(answer) :]
        if first_ids:
            stop = tokenizer.decode([int(first_ids[-1])])
            if stop and tail.startswith(stop):
                tail = tail[len(stop) :]
        return tokenizer(tail, add_special_tokens=False)["input_ids"]

    def _refinable_outputs(self, task: Task, result: Any) -> list[np.ndarray] | None:
        """The first answer's train outputs when it can be refined (valid and not all right), else None."""
        if result is None or result.error_type is not None or result.outputs is None:
            return None
        outputs = list(result.outputs)
        if len(outputs) != len(task.train):
            return None
        if all(np.array_equal(out, pair.output) for out, pair in zip(outputs, task.train, strict=True)):
            return None
        return outputs

    def first_turn_results(
        self, first_ids: Sequence[Sequence[int]], first_texts: Sequence[str], tasks: Sequence[Task]
    ) -> dict[int, Any]:
        """Sandbox results of the finished first answers whose program may run under the rules, by index.

        A first answer the rules refuse (no code, or under ``published`` code they reject) gets no result,
        so its episode ends after one turn, as it would score as an invalid answer.
        """
        jobs, job_rows = [], []
        for index, (ids, text, task) in enumerate(zip(first_ids, first_texts, tasks, strict=True)):
            finished = bool(ids) and ids[-1] in self.stop_token_ids
            code = extract_code(text) if finished else None
            program = apply_rules(code, len(task.train), self.rules)
            if program.run is not None:
                jobs.append((program.run, list(task.train_inputs)))
                job_rows.append(index)
        return dict(zip(job_rows, self.sandbox.run_many(jobs) if jobs else [], strict=True))

    # ---- the rollout

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        tokenizer = trainer.processing_class
        rows = [self._row(trainer, prompt) for prompt in prompts]
        tasks = [Task.from_row(row) for row in rows]
        first_prompts = [
            _strip_bos(
                tokenizer,
                render_first_turn(tokenizer, first_turn_messages(task, range(len(task.train)), int(row["test_index"]))),
            )
            for task, row in zip(tasks, rows, strict=True)
        ]
        prompt_ids = [tokenizer(text)["input_ids"] for text in first_prompts]
        first_ids, first_logps = self._sample(trainer, prompt_ids)
        episodes = [
            Episode(ids, list(c), None if first_logps is None else list(lp))
            for ids, c, lp in zip(prompt_ids, first_ids, first_logps or [None] * len(first_ids), strict=True)
        ]
        first_texts = tokenizer.batch_decode(first_ids, skip_special_tokens=True)

        results = self.first_turn_results([episode.first_ids for episode in episodes], first_texts, tasks)

        second_rows, second_prompts = [], []
        for index, (episode, text, task, row) in enumerate(zip(episodes, first_texts, tasks, rows, strict=True)):
            outputs = self._refinable_outputs(task, results.get(index))
            if outputs is None:
                continue
            messages = refinement_messages(task, int(row["test_index"]), text, outputs)
            refinement_prompt = _strip_bos(tokenizer, render_refinement(tokenizer, messages))
            episode.feedback_ids = self.feedback_ids(
                tokenizer, first_prompts[index], text, episode.first_ids, refinement_prompt
            )
            second_rows.append(index)
            second_prompts.append(episode.prompt_ids + episode.first_ids + episode.feedback_ids)
        if second_prompts:
            second_ids, second_logps = self._sample(trainer, second_prompts)
            for position, index in enumerate(second_rows):
                episodes[index].second_ids = list(second_ids[position])
                if second_logps is not None:
                    episodes[index].second_logps = list(second_logps[position])
        log.debug("online rollout: %d of %d episodes got a second turn", len(second_rows), len(episodes))

        logprobs = None if first_logps is None else [episode.logprobs for episode in episodes]
        final_ids = [episode.final_ids for episode in episodes]
        return {
            "prompt_ids": [episode.prompt_ids for episode in episodes],
            "completion_ids": [episode.completion_ids for episode in episodes],
            "logprobs": logprobs,
            "env_mask": [episode.env_mask for episode in episodes],
            FINAL_TEXT: tokenizer.batch_decode(final_ids, skip_special_tokens=True),
            FINAL_IDS: final_ids,
            TURNS: [1 if episode.second_ids is None else 2 for episode in episodes],
        }


class FinalTurnReward:
    """Scores the episode's last answer (not the whole completion, which also holds the first answer
    and the feedback): wraps a reward function such as :class:`ArcReward`, and logs the share of
    episodes with a second turn."""

    def __init__(self, reward: Callable[..., list[float]]) -> None:
        self.reward = reward
        self.__name__ = getattr(reward, "__name__", type(reward).__name__)

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[str], completion_ids: Any = None, **kwargs: Any
    ) -> list[float]:
        finals = kwargs.pop(FINAL_TEXT)
        final_ids = kwargs.pop(FINAL_IDS)
        turns = kwargs.pop(TURNS)
        log_metric = kwargs.get("log_metric")
        if log_metric is not None and turns:
            log_metric("online/second_turn_share", sum(t == 2 for t in turns) / len(turns))
        return self.reward(prompts, finals, final_ids, **kwargs)
