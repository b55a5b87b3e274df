"""Log-probabilities of completions that share a prompt, with the prompt's forward pass run once.

TRL scores every completion together with its prompt: it concatenates each row's prompt and completion and
runs the model over the whole row. In the presets all 32 completions of a step answer one task (task_repeats
4 x num_generations 8), so the same 1.6k-token prompt goes through the 8B model 32 times per pass, for the
policy's forward and backward and again for the reference log-probabilities: about 51k of a full-length
step's 84k tokens (benchmarks/README.md).

Here the rows of a batch whose (padded) prompts are equal form a group. The group's prompt, less its last
token, runs once; the keys and values it leaves at every layer become a read-only prefix that one pass over
the group's completions attends to. That pass starts at the prompt's last token, so its outputs score exactly
the positions TRL scores, through TRL's own fused LM head (temperature, labels, entropy). Positions stay TRL's
(left padding counted), so log-probs and entropies equal TRL's up to floating-point rounding. The prefix
stays in the autograd graph: the policy's gradient reaches the LoRA weights through both passes, the prompt's
share summed over the group as in the row-by-row computation.

Off a Triton device (a CPU) TRL's fused head scores every position of a row, its prompt's too, forward and
backward; there a prompt of one row (TRL shuffles a step's rows into micro-batches) takes the shared path as
well, and the prompt pass never reaches the head's vocabulary projection (docs/testing.md: half the canary's step).

Gradient checkpointing: transformers drops a layer's cache under checkpointing, because the backward's replay
of a layer would write a growing cache twice. The two caches here never grow (the prefix cache returns prefix
+ new states and stores nothing; the prompt pass's cache overwrites what it recorded), so a replay is harmless
and the layers may keep them for these passes (``_can_checkpoint_with_cache``). Reentrant checkpointing would
run the prompt pass without a graph and cut the prefix's gradient off, so it is refused.

Attention: passes over right-padded completions (TRL's layout) need only the causal mask aligned to the bottom
right of their scores, and run it with FlashAttention on a GPU (arc_pipeline/training/speed/prompt_attention.py); a
group with any other mask keeps the explicit mask.

Chunks of one micro-batch (train.backward_chunk_tokens, arc_pipeline/training/speed/chunked_backward.py) share one
prompt pass: :meth:`SharedPromptForward.prompt_pass` runs it once and :meth:`SharedPromptForward.reusing` hands
its keys and values to every chunk's pass over completions.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from arc_pipeline.training.speed.prompt_attention import (
    SHARED_PROMPT_CAUSAL,
    attention_of,
    bottom_right_attention_holds,
    right_padded,
    use_shared_prompt_attention,
)

log = logging.getLogger(__name__)

# keyword arguments of TRL's _get_per_token_logps_and_entropies that carry images: such rows go to TRL unchanged
_MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def prompt_groups(prompt_ids: Any, prompt_mask: Any) -> list[list[int]]:
    """Rows with equal prompts (the same tokens under the same mask), each group in row order, groups in the
    order of their first row. Every row is compared with each group's first row: one pass for the presets' one
    task a step; ``torch.unique(dim=0)`` sorted the rows (15 ms a call on an H200; benchmarks/prompt_groups.py)."""
    import torch

    keyed = torch.cat([prompt_ids * prompt_mask, prompt_mask], dim=1)
    rows = keyed.shape[0]
    grouped = [False] * rows
    groups: list[list[int]] = []
    for first in range(rows):
        if grouped[first]:
            continue
        # the rows from this one on (equality is transitive: an earlier group holds none equal to it); one sync
        equal = (keyed[first:] == keyed[first]).all(dim=1).tolist()
        members = [first + offset for offset, same in enumerate(equal) if same]
        for row in members:
            grouped[row] = True
        groups.append(members)
    return groups


def left_padding(prompt_mask_row: Any) -> int | None:
    """Padding columns before a prompt of the form ``0 ... 0 1 ... 1``; None for any other mask."""
    import torch

    length = int(prompt_mask_row.sum())
    padding = int(prompt_mask_row.shape[0]) - length
    expected = torch.cat([prompt_mask_row.new_zeros(padding), prompt_mask_row.new_ones(length)])
    return padding if torch.equal(prompt_mask_row, expected) else None


def _prefix(input_ids: Any, padding: int, prompt_width: int) -> tuple[Any, Any]:
    """The first row's prompt less its padding and last token (batch 1), and its positions: TRL's, the column
    index, left padding counted."""
    import torch

    positions = torch.arange(padding, prompt_width - 1, device=input_ids.device).unsqueeze(0)
    return input_ids[:1, padding : prompt_width - 1], positions


@dataclass
class PromptPass:
    """A prompt's pass (the prompt less its last token, at TRL's positions), kept for several passes over its
    completions: the tokens it ran and, per decoder layer, the keys and values it left."""

    prefix_ids: Any  # (1, tokens)
    prompt_width: int  # the padded prompt's columns (TRL's positions count the padding)
    keys: list[Any]
    values: list[Any]

    def serves(self, prefix_ids: Any, prompt_width: int) -> bool:
        import torch

        return (
            prompt_width == self.prompt_width
            and prefix_ids.shape == self.prefix_ids.shape
            and bool(torch.equal(prefix_ids, self.prefix_ids))
        )

    def leaves(self) -> PromptPass:
        """The same keys and values cut from the prompt's graph, as leaves that collect their own gradient."""
        return PromptPass(
            self.prefix_ids,
            self.prompt_width,
            [key.detach().requires_grad_(key.requires_grad) for key in self.keys],
            [value.detach().requires_grad_(value.requires_grad) for value in self.values],
        )


def _cache_classes() -> tuple[type, type, type]:
    """transformers' Cache with two layer kinds that never grow (built on first use: transformers is heavy)."""
    import torch
    from transformers.cache_utils import Cache, DynamicLayer

    class PromptRecordingLayer(DynamicLayer):
        """Keeps the states of the prompt pass; a checkpointing replay overwrites them with the same states."""

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
            return key_states, value_states

        def get_seq_length(self) -> int:
            return 0  # the pass's own tokens, not a past: its mask is the plain causal one

    class PrefixLayer(DynamicLayer):
        """A shared prompt's keys and values (batch 1) in front of each row's new states; nothing is stored."""

        def __init__(self, keys: Any, values: Any) -> None:
            super().__init__()
            self.keys, self.values = keys, values
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            rows = key_states.shape[0]
            keys = torch.cat([self.keys.expand(rows, -1, -1, -1), key_states], dim=-2)
            values = torch.cat([self.values.expand(rows, -1, -1, -1), value_states], dim=-2)
            return keys, values

    return Cache, PromptRecordingLayer, PrefixLayer


@contextlib.contextmanager
def layers_keep_the_cache(model: Any) -> Iterator[None]:
    """Checkpointed layers keep the (non-growing) caches of these passes, then as they were."""
    layers = [module for module in model.modules() if hasattr(module, "_can_checkpoint_with_cache")]
    own = [module.__dict__.get("_can_checkpoint_with_cache") for module in layers]
    for module in layers:
        module._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for module, value in zip(layers, own, strict=True):
            if value is None:
                del module._can_checkpoint_with_cache  # back to the class's own value
            else:
                module._can_checkpoint_with_cache = value


class SharedPromptForward:
    """Replaces a TRL ``GRPOTrainer``'s ``_get_per_token_logps_and_entropies`` (instance attribute) with one
    that runs each group's shared prompt once; batches with images or without a shared prompt go to TRL's."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self._original: Callable[..., Any] | None = None
        self._reused: PromptPass | None = None  # a prompt pass that serves its group instead of a new one
        self._bottom_right = False  # the bottom-right causal attention checked on the model's device and dtype
        self._rows_alone_shared = False  # a prompt of one row shared too: off a Triton device (module docstring)

    def attach(self, trainer: Any) -> SharedPromptForward:
        from transformers.modeling_layers import GradientCheckpointingLayer

        if not hasattr(GradientCheckpointingLayer, "_can_checkpoint_with_cache"):
            raise RuntimeError(
                "share_prompt_forward: this transformers version drops every cache under gradient checkpointing; "
                "install transformers>=5.17 or set train.share_prompt_forward false"
            )
        kwargs = trainer.args.gradient_checkpointing_kwargs or {}
        if trainer.args.gradient_checkpointing and kwargs.get("use_reentrant") is True:
            raise ValueError(
                "share_prompt_forward: reentrant gradient checkpointing runs the shared prompt without a graph; "
                "set train.share_prompt_forward false or use non-reentrant checkpointing"
            )
        use_shared_prompt_attention()
        self._bottom_right = self._check_attention(trainer)
        self._rows_alone_shared = next(trainer.model.parameters()).device.type not in ("cuda", "xpu")
        self.trainer = trainer
        self._original = trainer._get_per_token_logps_and_entropies
        trainer._get_per_token_logps_and_entropies = self.logps_and_entropies
        log.info("completions of one prompt share its forward pass (train.share_prompt_forward)")
        return self

    @staticmethod
    def _check_attention(trainer: Any) -> bool:
        import torch

        config = trainer.model.config
        heads = getattr(config, "num_attention_heads", None)
        if getattr(config, "_attn_implementation", None) != "sdpa" or not heads:
            return False
        parameter = next(trainer.model.parameters())
        dtype = torch.bfloat16 if trainer.args.bf16 else torch.float16 if trainer.args.fp16 else parameter.dtype
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        groups = heads // (getattr(config, "num_key_value_heads", None) or heads)
        if bottom_right_attention_holds(parameter.device, dtype, head_dim, groups):
            return True
        log.warning(
            "share_prompt_forward: PyTorch's bottom-right causal attention does not match an explicit mask on %s "
            "(%s); the shared passes keep the explicit mask (slower)",
            parameter.device,
            dtype,
        )
        return False

    def logps_and_entropies(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[Any, Any, Any]:
        import torch

        assert self._original is not None

        def trl(rows: list[int] | None = None) -> tuple[Any, Any, Any]:
            ids, mask = (input_ids, attention_mask) if rows is None else (input_ids[rows], attention_mask[rows])
            return self._original(
                model,
                ids,
                mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **multimodal,
            )

        prompt_width = int(input_ids.shape[1]) - logits_to_keep
        if compute_aux_loss or any(multimodal.get(key) is not None for key in _MULTIMODAL_KEYS) or prompt_width < 2:
            return trl()
        groups = prompt_groups(input_ids[:, :prompt_width], attention_mask[:, :prompt_width])
        if self._reused is None and all(len(rows) == 1 for rows in groups) and not self._rows_alone_shared:
            return trl()
        logps: list[Any] = []
        entropies: list[Any] = []
        order: list[int] = []
        for rows in groups:
            padding = left_padding(attention_mask[rows[0], :prompt_width])
            reused = None
            if self._reused is not None and padding is not None:
                prefix, _ = _prefix(input_ids[rows[0] : rows[0] + 1], padding, prompt_width)
                reused = self._reused if self._reused.serves(prefix, prompt_width) else None
            alone = len(rows) == 1 and not self._rows_alone_shared
            if reused is None and (padding is None or prompt_width - padding < 2 or alone):
                group_logps, group_entropies, _ = trl(rows)
            else:
                group_logps, group_entropies = self._group(
                    model,
                    input_ids[rows],
                    attention_mask[rows],
                    prompt_width,
                    padding,
                    batch_size,
                    compute_entropy,
                    reused,
                )
            logps.append(group_logps)
            entropies.append(group_entropies)
            order.extend(rows)
        back = torch.argsort(torch.tensor(order, device=input_ids.device))
        return (
            torch.cat(logps)[back],
            torch.cat(entropies)[back] if compute_entropy else None,
            None,
        )

    def prompt_pass(self, model: Any, prompt_ids: Any, prompt_mask: Any) -> PromptPass | None:
        """The pass of one left-padded prompt (a row of ``prompt_ids``/``prompt_mask``), in the autograd graph
        when gradients are on; None for a prompt the shared path does not take (not left padded, or too short)."""
        prompt_width = int(prompt_ids.shape[1])
        padding = left_padding(prompt_mask[0])
        if padding is None or prompt_width - padding < 2:
            return None
        prefix, positions = _prefix(prompt_ids, padding, prompt_width)
        with layers_keep_the_cache(model):
            keys, values = self._run_prompt(model, prefix, positions)
        return PromptPass(prefix, prompt_width, keys, values)

    @contextlib.contextmanager
    def reusing(self, prompt: PromptPass) -> Iterator[None]:
        """Passes over completions of ``prompt``'s prompt attend to its keys and values instead of a new pass."""
        self._reused = prompt
        try:
            yield
        finally:
            self._reused = None

    def _run_prompt(self, model: Any, prefix: Any, positions: Any) -> tuple[list[Any], list[Any]]:
        """Keys and values of every layer after a pass over ``prefix`` (batch 1) at ``positions``; the LM head
        sees one position (TRL's fused head would score every position off a Triton device, none here)."""
        cache_class, recording_layer, _ = _cache_classes()
        recorder = cache_class(layer_class_to_replicate=recording_layer)
        with self.trainer.accelerator.autocast():
            model(input_ids=prefix, position_ids=positions, past_key_values=recorder, logits_to_keep=1)
        return [layer.keys for layer in recorder.layers], [layer.values for layer in recorder.layers]

    def _group(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        prompt_width: int,
        padding: int,
        batch_size: int | None,
        compute_entropy: bool,
        reused: PromptPass | None = None,
    ) -> tuple[Any, Any]:
        """Log-probs (and entropies) of the completions of rows that share one prompt starting at ``padding``;
        their passes attend to ``reused``'s keys and values when given, else to a new pass of the prompt."""
        import torch

        cache_class, _, prefix_layer = _cache_classes()
        rows = int(input_ids.shape[0])
        device = input_ids.device
        prefix, prefix_positions = _prefix(input_ids, padding, prompt_width)
        prefix_length = int(prefix.shape[1])
        # the pass over completions starts at the prompt's last token: its output scores the first completion token
        tail_ids = input_ids[:, prompt_width - 1 :]
        tail_mask = attention_mask[:, prompt_width - 1 :]
        labels = tail_ids.masked_fill(tail_mask == 0, -100)
        labels[:, 0] = -100
        tail_positions = torch.arange(prompt_width - 1, int(input_ids.shape[1]), device=device).unsqueeze(0)
        # right-padded completions (TRL's layout): the bottom-right causal mask alone, FlashAttention on a GPU
        causal_only = self._bottom_right and right_padded(tail_mask) and attention_of(model) == "sdpa"
        logps, entropies = [], []
        with layers_keep_the_cache(model):
            if reused is not None:
                keys, values = reused.keys, reused.values
            else:
                keys, values = self._run_prompt(model, prefix, prefix_positions)
            prefix_layers = [prefix_layer(key, value) for key, value in zip(keys, values, strict=True)]
            step = batch_size or rows
            for start in range(0, rows, step):
                stop = min(start + step, rows)
                cache = cache_class(layers=prefix_layers)
                if causal_only:
                    attention: dict[str, Any] = {SHARED_PROMPT_CAUSAL: True}
                else:
                    ones = tail_mask.new_ones(stop - start, prefix_length)
                    attention = {"attention_mask": torch.cat([ones, tail_mask[start:stop]], dim=1)}
                with self.trainer.accelerator.autocast():
                    outputs = model(
                        input_ids=tail_ids[start:stop],
                        position_ids=tail_positions.expand(stop - start, -1),
                        past_key_values=cache,
                        labels=labels[start:stop],
                        fused_lm_head=True,
                        **attention,
                    )
                logps.append(outputs.log_probs)
                if compute_entropy:
                    entropies.append(outputs.entropy)
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None
