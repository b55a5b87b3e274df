"""Forward and backward of a GRPO micro-batch in chunks of completions, each without activation checkpointing.

Gradient checkpointing lets a micro-batch of 8 full-length 8B completions fit on one GPU, at the price of a
second forward pass in the backward (a third of the training compute). Without it, activations cost about
6.6 MiB per token at the 8B shape (benchmarks/README.md), so only a few thousand tokens fit beside the colocated
vLLM engine. ``train.backward_chunk_tokens`` takes both: the micro-batch TRL hands to ``compute_loss`` is cut
into chunks of equally many completions, as many as keep every chunk within that many tokens (right padding
trimmed per chunk); each chunk runs forward and backward without checkpointing, and a single completion longer
than the budget runs alone with checkpointing. In a data-parallel run all processes use the smallest number of
completions per chunk among them, because TRL gathers per-completion metrics inside each loss computation.
With ``train.share_prompt_forward``, a micro-batch whose completions all answer one prompt runs that prompt
once for all its chunks (arc_pipeline/training/speed/shared_prompt.py): the prompt's pass (checkpointed if the model
is) leaves keys and values at every layer; each chunk's pass over its completions attends to copies of them cut
from the graph (leaves), and the gradients that reach those leaves, summed over the chunks, go back through the
prompt's pass once. The budget then counts the chunk's completions alone.

The loss is unchanged: each chunk's loss is weighted so that the sum is TRL's loss of the whole micro-batch,
whose normalisation depends on the loss type (``bnpo`` divides by the micro-batch's tokens, ``grpo`` averages
its sequences, ``dapo`` divides by the generation batch's tokens).

How the gradients of the chunks meet: every chunk but the last is differentiated here
(``torch.autograd.grad``, under ``no_sync`` in a distributed run) and its gradient kept; the last chunk's loss
goes back to the trainer with a zero-valued term whose gradient is the kept sum. The trainer's one
``backward`` then sees the micro-batch's whole gradient, so gradient-accumulation scaling, mixed precision and
the data-parallel all-reduce happen once, exactly as without chunks. With one shared prompt pass every chunk
is differentiated here, and the zero-valued term also carries the prompt's keys and values times their
gradient, so the trainer's backward is the prompt pass's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arc_pipeline.training.speed.shared_prompt import PromptPass, SharedPromptForward

log = logging.getLogger(__name__)

# the per-sequence entries of a GRPO micro-batch whose second dimension is the prompt, not the completion
PROMPT_KEYS = frozenset({"prompt_ids", "prompt_mask"})
# loss types by how TRL normalises a micro-batch's loss (trl GRPOTrainer._compute_loss)
PER_TOKEN_OF_MICRO_BATCH = frozenset({"bnpo"})
PER_SEQUENCE_OF_MICRO_BATCH = frozenset({"grpo", "sapo", "dr_grpo", "luspo"})
PER_TOKEN_OF_GENERATION_BATCH = frozenset({"dapo", "cispo", "vespo"})


def chunk_tokens(prompt_width: int, rows: int, completion_width: int, shared_prompt: bool) -> int:
    """Tokens of a chunk's forward pass: its rows times (prompt + completion), or with the micro-batch's one
    shared prompt pass (train.share_prompt_forward) each row's completion from the prompt's last token on."""
    if shared_prompt:
        return rows * (completion_width + 1)
    return rows * (prompt_width + completion_width)


def plan_chunks(
    prompt_width: int,
    completion_lengths: list[int],
    token_budget: int,
    agree: Callable[[int], int] = lambda rows: rows,
    shared_prompt: bool = False,
) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` rows of a micro-batch, the same number in each chunk (the last may hold fewer).

    A chunk's tokens are those of its forward pass once the completion padding beyond its longest row is
    trimmed (:func:`chunk_tokens`). The rows per chunk are the most for
    which every chunk stays within ``token_budget``, and at least one: a row over the budget on its own is a
    chunk of one (it runs with checkpointing). ``agree`` turns this process's number into the one all
    processes of a data-parallel run use (their minimum): TRL gathers per-completion metrics inside every
    loss computation, so each process must compute the same number of chunks of the same sizes.
    """
    rows = len(completion_lengths)

    def fits(size: int) -> bool:
        blocks = (completion_lengths[start : start + size] for start in range(0, rows, size))
        return all(
            chunk_tokens(prompt_width, len(block), max(block), shared_prompt) <= token_budget for block in blocks
        )

    size = agree(next((size for size in range(rows, 1, -1) if fits(size)), 1))
    return [(start, min(start + size, rows)) for start in range(0, rows, size)]


def check_loss_type(loss_type: str) -> None:
    known = PER_TOKEN_OF_MICRO_BATCH | PER_SEQUENCE_OF_MICRO_BATCH | PER_TOKEN_OF_GENERATION_BATCH
    if loss_type not in known:
        raise ValueError(f"backward_chunk_tokens: no chunk weighting known for TRL loss type {loss_type!r}")


def chunk_weights(loss_type: str, mask: Any, chunks: list[tuple[int, int]]) -> list[float]:
    """Factor of each chunk's TRL loss so that the factored sum is the micro-batch's TRL loss."""
    check_loss_type(loss_type)
    rows = int(mask.shape[0])
    if loss_type in PER_TOKEN_OF_MICRO_BATCH:
        tokens = max(float(mask.sum()), 1.0)
        return [max(float(mask[start:stop].sum()), 1.0) / tokens for start, stop in chunks]
    if loss_type in PER_SEQUENCE_OF_MICRO_BATCH:
        return [(stop - start) / rows for start, stop in chunks]
    return [1.0 for _ in chunks]  # normalised by the generation batch's tokens, whatever the chunk


def chunk_inputs(inputs: dict[str, Any], start: int, stop: int, completion_width: int) -> dict[str, Any]:
    """Rows ``start:stop`` of a micro-batch, completion-shaped entries cut to ``completion_width`` columns."""
    import torch

    rows = int(inputs["completion_ids"].shape[0])
    full_width = int(inputs["completion_ids"].shape[1])
    part: dict[str, Any] = {}
    for key, value in inputs.items():
        piece = value
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == rows:
            piece = value[start:stop]
            if key not in PROMPT_KEYS and piece.dim() >= 2 and piece.shape[1] == full_width:
                piece = piece[:, :completion_width]
        elif isinstance(value, list) and len(value) == rows:
            piece = value[start:stop]
        part[key] = piece
    return part


@contextlib.contextmanager
def without_checkpointing(model: Any) -> Iterator[None]:
    """Activation checkpointing of the model's layers off for one chunk, then as it was."""
    layers = [module for module in model.modules() if getattr(module, "gradient_checkpointing", False) is True]
    for module in layers:
        module.gradient_checkpointing = False
    try:
        yield
    finally:
        for module in layers:
            module.gradient_checkpointing = True


class ChunkedBackward:
    """Replaces a TRL ``GRPOTrainer``'s ``compute_loss`` (instance attribute) with the chunked one."""

    def __init__(self, token_budget: int, shared_prompt: SharedPromptForward | None = None) -> None:
        self.token_budget = token_budget
        self.shared_prompt = shared_prompt  # the trainer's shared prompt forward (shared_prompt.py), if attached
        self.trainer: Any = None
        self._compute_loss: Callable[..., Any] | None = None

    def attach(self, trainer: Any) -> ChunkedBackward:
        if getattr(trainer, "top_entropy_quantile", 1.0) < 1.0 or getattr(trainer, "_entropy_bonus_enabled", False):
            raise ValueError(
                "backward_chunk_tokens: TRL's entropy mask and entropy bonus are computed over the whole "
                "micro-batch and cannot be split into chunks; leave backward_chunk_tokens unset"
            )
        check_loss_type(trainer.loss_type)  # at the start, not at the first step
        log.info("forward and backward in chunks of at most %d tokens without checkpointing", self.token_budget)
        self.trainer = trainer
        self._compute_loss = trainer.compute_loss
        trainer.compute_loss = self.compute_loss
        return self

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        import torch

        assert self._compute_loss is not None
        if not (model.training and torch.is_grad_enabled()):
            return self._compute_loss(model, inputs, *args, **kwargs)
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        lengths = _completion_lengths(inputs["completion_mask"])
        prompt_width = int(inputs["prompt_ids"].shape[1])
        prompt = self._shared_prompt_pass(model, inputs)
        chunks = plan_chunks(prompt_width, lengths, self.token_budget, self._agree, prompt is not None)
        weights = chunk_weights(self.trainer.loss_type, mask, chunks)
        if prompt is not None:
            return self._over_one_prompt_pass(model, inputs, prompt, chunks, weights, lengths, args, kwargs)
        params = [parameter for parameter in model.parameters() if parameter.requires_grad]
        kept: list[torch.Tensor | None] = [None] * len(params)
        earlier = None  # the loss values of the chunks before the last (no graph)
        for index, ((start, stop), weight) in enumerate(zip(chunks, weights, strict=True)):
            width = max(1, *lengths[start:stop])
            part = chunk_inputs(inputs, start, stop, width)
            tokens = chunk_tokens(prompt_width, stop - start, width, False)
            last = index == len(chunks) - 1
            sync = contextlib.nullcontext() if last else self.trainer.accelerator.no_sync(model)
            # a row over the budget on its own keeps the model's checkpointing (if it has it on)
            fits = without_checkpointing(model) if tokens <= self.token_budget else contextlib.nullcontext()
            with sync, fits:
                loss = self._compute_loss(model, part, *args, **kwargs) * weight
                if last:
                    break
                grads = torch.autograd.grad(loss, params, allow_unused=True)
            _sum_into(kept, grads, float32_from=len(kept))
            earlier = loss.detach() if earlier is None else earlier + loss.detach()
        loss = _with_gradient(loss, params, kept)  # the earlier chunks' kept gradient
        return loss if earlier is None else loss + earlier

    def _shared_prompt_pass(self, model: Any, inputs: dict[str, Any]) -> PromptPass | None:
        """The pass of the one prompt all rows of the micro-batch answer, run now for all chunks; None when the
        rows answer several prompts or the shared prompt forward is off."""
        if self.shared_prompt is None or int(inputs["prompt_ids"].shape[0]) < 2:
            return None
        from arc_pipeline.training.speed.shared_prompt import prompt_groups

        if len(prompt_groups(inputs["prompt_ids"], inputs["prompt_mask"])) != 1:
            return None
        return self.shared_prompt.prompt_pass(model, inputs["prompt_ids"][:1], inputs["prompt_mask"][:1])

    def _over_one_prompt_pass(
        self,
        model: Any,
        inputs: dict[str, Any],
        prompt: PromptPass,
        chunks: list[tuple[int, int]],
        weights: list[float],
        lengths: list[int],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Every chunk against the leaves of ``prompt``'s keys and values, differentiated here; the returned loss
        carries the chunks' gradient and, through the prompt's keys and values, the prompt pass's."""
        import torch

        assert self._compute_loss is not None and self.shared_prompt is not None
        leaves = prompt.leaves()
        params = [parameter for parameter in model.parameters() if parameter.requires_grad]
        states = [
            (graph, leaf)
            for graph, leaf in zip(prompt.keys + prompt.values, leaves.keys + leaves.values, strict=True)
            if leaf.requires_grad
        ]
        targets = params + [leaf for _, leaf in states]
        kept: list[torch.Tensor | None] = [None] * len(targets)
        total = None
        with self.shared_prompt.reusing(leaves), self.trainer.accelerator.no_sync(model):
            for (start, stop), weight in zip(chunks, weights, strict=True):
                width = max(1, *lengths[start:stop])
                part = chunk_inputs(inputs, start, stop, width)
                fits = chunk_tokens(0, stop - start, width, True) <= self.token_budget
                with without_checkpointing(model) if fits else contextlib.nullcontext():
                    loss = self._compute_loss(model, part, *args, **kwargs) * weight
                    grads = torch.autograd.grad(loss, targets, allow_unused=True)
                _sum_into(kept, grads, float32_from=len(params))  # keys and values summed in float32
                total = loss.detach() if total is None else total + loss.detach()
        # the chunks' gradient on the parameters and, through the prompt pass, the prompt's
        return _with_gradient(total, params + [graph for graph, _ in states], kept)

    def _agree(self, rows_per_chunk: int) -> int:
        """The smallest rows-per-chunk of all processes (a data-parallel run); this process's alone otherwise."""
        import torch

        accelerator = self.trainer.accelerator
        if getattr(accelerator, "num_processes", 1) <= 1:
            return rows_per_chunk
        mine = torch.tensor([rows_per_chunk], device=accelerator.device)
        return int(accelerator.gather(mine).min())


def _sum_into(kept: list[Any], grads: tuple[Any, ...], float32_from: int) -> None:
    """Add each gradient to its running sum in ``kept``, those from index ``float32_from`` on in float32."""
    for i, grad in enumerate(grads):
        if grad is not None:
            summand = grad.float() if i >= float32_from else grad
            kept[i] = summand if kept[i] is None else kept[i] + summand


def _with_gradient(loss: Any, tensors: list[Any], gradients: list[Any]) -> Any:
    """``loss`` plus a term of value zero whose gradient on each tensor is its gradient (None: no term)."""
    import torch

    carried = [
        (tensor.to(gradient.dtype) * gradient).sum()
        for tensor, gradient in zip(tensors, gradients, strict=True)
        if gradient is not None
    ]
    if not carried:
        return loss
    surrogate = torch.stack(carried).sum()
    return loss + (surrogate - surrogate.detach())


def _completion_lengths(completion_mask: Any) -> list[int]:
    """Columns up to each row's last unmasked completion token (0 for an empty row)."""
    import torch

    width = completion_mask.shape[1]
    positions = torch.arange(1, width + 1, device=completion_mask.device)
    return (completion_mask.bool() * positions).amax(dim=1).tolist()
