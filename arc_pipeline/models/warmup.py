"""The answer-format warm-up of the offline models (``tiny`` and, optionally, ``random``): a short
supervised fine-tuning after which the random weights answer every prompt with one of a few trivial
fenced programs and end their turn (:func:`warm_up` says why and how)."""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, model_validator

from arc_pipeline.domain.canary import CANARY_BODIES, CANARY_PROGRAMS
from arc_pipeline.models.tokens import END_OF_TURN_TOKEN

log = logging.getLogger(__name__)


class WarmupSettings(Protocol):
    """The warm-up fields that ``TinyModelConfig`` and ``RandomModelConfig`` share."""

    seed: int
    warmup_steps: int
    warmup_learning_rate: float
    warmup_batch_size: int
    warmup_answers: WarmupAnswers
    warmup_canary_weights: dict[str, float] | None


# Bodies of the warm-up answers (see warm_up): trivial programs, so that samples differ. Most give a
# valid grid for any input and now and then solve a task by luck; the last two fail on purpose (a 1-D
# row, colours out of range), so valid and invalid outputs both occur and GRPO sees reward variance.
WARMUP_BODIES = (
    "return input_grid",
    "return np.flipud(input_grid)",
    "return np.fliplr(input_grid)",
    "return np.rot90(input_grid)",
    "return np.transpose(input_grid)",
    "return np.where(input_grid, 1, 0)",
    "return input_grid[:2, :2]",
    "return input_grid[0]",
    "return input_grid + 10",
)


WarmupAnswers = Literal["trivial", "canary"]


class WarmupAnswerFields(BaseModel):
    """The warm-up's answer fields, alike in ``TinyModelConfig`` and ``RandomModelConfig`` (their steps and
    learning rates differ, so each model's config declares those)."""

    warmup_batch_size: int = Field(16, ge=1, description="sequences per warm-up step")
    warmup_answers: WarmupAnswers = Field(
        "trivial",
        description="what the warm-up answers with: trivial (a few trivial programs, some failing on purpose) or "
        "canary (the canary family's programs, arc_pipeline/domain/canary.py: config/canary.yaml)",
    )
    # Left out of the config while unset, so that results made before this field existed stay up to date.
    warmup_canary_weights: dict[str, float] | None = Field(
        None,
        exclude_if=lambda weights: weights is None,
        description="with warmup_answers: canary, how often the warm-up answers with each canary program (names "
        "from arc_pipeline/domain/canary.py; relative weights, a program left out or at 0 is never answered; over "
        "a preset's weights they merge key by key), whatever the task; null = uniformly. config/canary.yaml makes "
        "the base model rarely guess the most common solution",
    )

    @model_validator(mode="after")
    def _canary_weights(self) -> WarmupAnswerFields:
        check_canary_weights(self.warmup_answers, self.warmup_canary_weights)
        return self


def warmup_bodies(answers: WarmupAnswers) -> tuple[str, ...]:
    """The bodies a warm-up draws from: the trivial set, or the canary family's programs
    (arc_pipeline/domain/canary.py), among which the base model guesses independently of the task
    (uniformly, or with ``warmup_canary_weights``: answer_probabilities)."""
    return CANARY_BODIES if answers == "canary" else WARMUP_BODIES


def check_canary_weights(answers: WarmupAnswers, weights: dict[str, float] | None) -> None:
    """The canary answers' weights name canary programs, are >= 0, and not all 0 (a ValueError says which)."""
    if weights is None:
        return
    if answers != "canary":
        raise ValueError("warmup_canary_weights: only with warmup_answers: canary")
    unknown = sorted(set(weights) - set(CANARY_PROGRAMS))
    if unknown:
        raise ValueError(f"warmup_canary_weights: unknown programs {unknown}; known: {sorted(CANARY_PROGRAMS)}")
    if any(weight < 0 for weight in weights.values()) or not any(weights.values()):
        raise ValueError("warmup_canary_weights: weights must be >= 0 and not all 0")


def answer_probabilities(answers: WarmupAnswers, canary_weights: dict[str, float] | None) -> list[float] | None:
    """How often the warm-up answers with each body of warmup_bodies(answers); None = uniformly. A program
    the weights leave out is never answered."""
    if canary_weights is None:
        return None
    weights = [canary_weights.get(name, 0.0) for name in CANARY_PROGRAMS]
    return [weight / sum(weights) for weight in weights]


def warmup_answer(body: str) -> str:
    """A short BARC-style answer: a fenced program defining ``transform`` with ``body``."""
    return f"```python\nfrom common import *\n\ndef transform(input_grid):\n    {body}\n```"


WARMUP_TAIL = (8, 24)  # an example keeps the last 8..24 tokens of a real prompt
WARMUP_SAMPLE = 32  # and this many sampled from the rest (see warm_up)


def warmup_prompts(
    tasks: list[Any], tokenizer: Any, rng: Any, bodies: tuple[str, ...] = WARMUP_BODIES
) -> list[tuple[list[int], bool]]:
    """Token ids of real prompts, two per task: (ids, is_first_turn).

    A first-turn prompt of the randomly augmented task (it ends inside the assistant turn) and a
    refinement prompt (it ends with a new assistant header) after a random warm-up answer.
    """
    from arc_pipeline.domain.augmentation import Augmentation
    from arc_pipeline.domain.prompts import (
        first_turn_messages,
        refinement_messages,
        render_first_turn,
        render_refinement,
    )

    prompts = []
    for task in tasks:
        augmented = Augmentation.random(rng).apply_task(task)
        order = [int(i) for i in rng.permutation(len(task.train))]
        test_index = int(rng.integers(len(task.test)))
        first = render_first_turn(tokenizer, first_turn_messages(augmented, order, test_index))
        previous = "\n" + warmup_answer(bodies[int(rng.integers(len(bodies)))])
        second = render_refinement(
            tokenizer, refinement_messages(augmented, test_index, previous, augmented.train_inputs)
        )
        for text, is_first in ((first, True), (second, False)):
            prompts.append((tokenizer(text, add_special_tokens=False).input_ids, is_first))
    return prompts


def warm_up(model: Any, tokenizer: Any, tasks: list[Any], config: WarmupSettings) -> dict[str, Any]:
    """Teach the random model the answer format, in place: a short supervised fine-tuning.

    Without it a random model never writes a fenced program, every prediction fails to parse and the
    refinement and training stages get no data. Each example is the tail of a real prompt (first turn
    or refinement) followed by a random warm-up answer and ``<|eot_id|>``; the loss covers only the
    answer (and the prompt's last token, which predicts its first token).

    Real prompts are thousands of tokens long; training on them would take minutes on a CPU. An
    example keeps the prompt's last few tokens and a random sample of the rest, all at their real
    positions; every query sees each sampled token with ``log(rest / sample)`` added to its attention
    score, as if each stood for the ``rest / sample`` tokens around it. So the model learns attention
    that the long prompts it meets at inference do not dilute.
    One thread, seeded: the matrices are small, threads only fight over a shared CPU (7x slower on
    a busy 2-core machine), and the weights do not depend on the number of cores.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _warm_up(model, tokenizer, tasks, config)
    finally:
        torch.set_num_threads(threads)


def _warm_up(model: Any, tokenizer: Any, tasks: list[Any], config: WarmupSettings) -> dict[str, Any]:
    import math

    import numpy as np
    import torch
    from tqdm import tqdm

    started = time.perf_counter()
    rng = np.random.default_rng(config.seed)
    bodies = warmup_bodies(config.warmup_answers)
    probabilities = answer_probabilities(config.warmup_answers, config.warmup_canary_weights)
    prompts = warmup_prompts(tasks, tokenizer, rng, bodies)
    eot = tokenizer.convert_tokens_to_ids(END_OF_TURN_TOKEN)
    answers = {
        is_first: [
            tokenizer(("\n" if is_first else "") + warmup_answer(body), add_special_tokens=False).input_ids + [eot]
            for body in bodies
        ]
        for is_first in (True, False)
    }
    bos, pad = tokenizer.bos_token_id, tokenizer.pad_token_id
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device  # the random 8B model warms up on the GPU
    blocked = torch.finfo(dtype).min
    torch.manual_seed(config.seed)
    model.train()
    # On a GPU the fused kernel: the default multi-tensor one allocates temporaries as large as the weights,
    # which an 8B model's full fine-tuning (weights, gradients and two moments: 64 GiB) cannot afford on 80 GB.
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.warmup_learning_rate, weight_decay=0.0, fused=device.type == "cuda"
    )
    ramp = max(1, config.warmup_steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / ramp) * max(0.05, 1 - step / config.warmup_steps)
    )
    losses = []
    for _ in tqdm(range(config.warmup_steps), desc="answer-format warm-up", unit="step", mininterval=5):
        rows = []
        for _ in range(config.warmup_batch_size):
            prompt, is_first = prompts[int(rng.integers(len(prompts)))]
            tail = min(int(rng.integers(WARMUP_TAIL[0], WARMUP_TAIL[1] + 1)), len(prompt) - 1)
            rest = len(prompt) - 1 - tail  # tokens between <|begin_of_text|> and the tail
            sample = min(WARMUP_SAMPLE, rest)
            kept = np.sort(rng.choice(np.arange(1, 1 + rest), size=sample, replace=False))
            choice = rng.integers(len(bodies)) if probabilities is None else rng.choice(len(bodies), p=probabilities)
            answer = answers[is_first][int(choice)]
            ids = [bos, *(prompt[i] for i in kept), *prompt[-tail:], *answer]
            positions = [0, *kept.tolist(), *range(len(prompt) - tail, len(prompt) + len(answer))]
            rows.append((ids, positions, sample, tail, math.log(rest / sample) if sample else 0.0))
        width = max(len(ids) for ids, *_ in rows)
        input_ids = torch.full((len(rows), width), pad)
        position_ids = torch.zeros((len(rows), width), dtype=torch.long)
        targets = torch.full((len(rows), width), -100)
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        bias = torch.zeros((len(rows), 1, width, width), dtype=dtype)
        for row, (ids, positions, sample, tail, scale) in enumerate(rows):
            last = sample + tail  # index of the prompt's last token, which predicts the answer's first
            input_ids[row, : len(ids)] = torch.tensor(ids)
            position_ids[row, : len(ids)] = torch.tensor(positions)
            position_ids[row, len(ids) :] = positions[-1]
            targets[row, last : len(ids) - 1] = torch.tensor(ids[last + 1 :])  # next-token targets
            bias[row, 0, :, 1 : 1 + sample] = scale
            bias[row, 0, :, len(ids) :] = blocked  # padding
        bias.masked_fill_(~causal, blocked)
        input_ids, position_ids, targets, bias = (t.to(device) for t in (input_ids, position_ids, targets, bias))
        hidden = model.model(input_ids=input_ids, position_ids=position_ids, attention_mask=bias).last_hidden_state
        scored = targets != -100
        logits = model.lm_head(hidden[scored])  # only where a target is: most positions are prompt
        loss = torch.nn.functional.cross_entropy(logits.float(), targets[scored])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    del optimizer, scheduler  # the AdamW state of an 8B model is 32 GiB: free it before saving
    model.eval()
    seconds = time.perf_counter() - started
    final = float(np.mean(losses[-10:]))
    log.info("answer-format warm-up: %d steps in %.1f s, final loss %.3f", len(losses), seconds, final)
    return {"steps": len(losses), "seconds": round(seconds, 2), "final_loss": round(final, 4)}
