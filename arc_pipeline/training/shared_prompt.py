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

Gradient checkpointing: transformers drops a layer's cache under checkpointing, because the backward's replay
of a layer would write a growing cache twice. The two caches here never grow (the prefix cache returns prefix
+ new states and stores nothing; the prompt pass's cache overwrites what it recorded), so a replay is harmless
and the layers may keep them for these passes (``_can_checkpoint_with_cache``). Reentrant checkpointing would
run the prompt pass without a graph and cut the prefix's gradient off, so it is refused.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

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
    order of their first row."""
    import torch

    keyed = torch.cat([prompt_ids * prompt_mask, prompt_mask], dim=1)
    _, group_of_row = torch.unique(keyed, dim=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for row, group in enumerate(group_of_row.tolist()):
        groups.setdefault(group, []).append(row)
    return list(groups.values())


def left_padding(prompt_mask_row: Any) -> int | None:
    """Padding columns before a prompt of the form ``0 ... 0 1 ... 1``; None for any other mask."""
    import torch

    length = int(prompt_mask_row.sum())
    padding = int(prompt_mask_row.shape[0]) - length
    expected = torch.cat([prompt_mask_row.new_zeros(padding), prompt_mask_row.new_ones(length)])
    return padding if torch.equal(prompt_mask_row, expected) else None


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
        self.trainer = trainer
        self._original = trainer._get_per_token_logps_and_entropies
        trainer._get_per_token_logps_and_entropies = self.logps_and_entropies
        log.info("completions of one prompt share its forward pass (train.share_prompt_forward)")
        return self

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
        if all(len(rows) == 1 for rows in groups):
            return trl()
        logps: list[Any] = []
        entropies: list[Any] = []
        order: list[int] = []
        for rows in groups:
            padding = left_padding(attention_mask[rows[0], :prompt_width])
            if padding is None or prompt_width - padding < 2 or len(rows) == 1:
                group_logps, group_entropies, _ = trl(rows)
            else:
                group_logps, group_entropies = self._group(
                    model, input_ids[rows], attention_mask[rows], prompt_width, padding, batch_size, compute_entropy
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

    def _group(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        prompt_width: int,
        padding: int,
        batch_size: int | None,
        compute_entropy: bool,
    ) -> tuple[Any, Any]:
        """Log-probs (and entropies) of the completions of rows that share one prompt starting at ``padding``."""
        import torch

        cache_class, recording_layer, prefix_layer = _cache_classes()
        rows = int(input_ids.shape[0])
        device = input_ids.device
        prefix = input_ids[:1, padding : prompt_width - 1]  # the prompt but its last token
        prefix_length = int(prefix.shape[1])
        # TRL's positions: the column index, left padding counted
        prefix_positions = torch.arange(padding, prompt_width - 1, device=device).unsqueeze(0)
        # the pass over completions starts at the prompt's last token: its output scores the first completion token
        tail_ids = input_ids[:, prompt_width - 1 :]
        tail_mask = attention_mask[:, prompt_width - 1 :]
        labels = tail_ids.masked_fill(tail_mask == 0, -100)
        labels[:, 0] = -100
        tail_positions = torch.arange(prompt_width - 1, int(input_ids.shape[1]), device=device).unsqueeze(0)
        logps, entropies = [], []
        with layers_keep_the_cache(model):
            recorder = cache_class(layer_class_to_replicate=recording_layer)
            with self.trainer.accelerator.autocast():
                model(
                    input_ids=prefix,
                    position_ids=prefix_positions,
                    past_key_values=recorder,
                    labels=torch.full_like(prefix, -100),
                    fused_lm_head=True,
                )
            prefix_layers = [prefix_layer(layer.keys, layer.values) for layer in recorder.layers]
            step = batch_size or rows
            for start in range(0, rows, step):
                stop = min(start + step, rows)
                cache = cache_class(layers=prefix_layers)
                mask = torch.cat([tail_mask.new_ones(stop - start, prefix_length), tail_mask[start:stop]], dim=1)
                with self.trainer.accelerator.autocast():
                    outputs = model(
                        input_ids=tail_ids[start:stop],
                        attention_mask=mask,
                        position_ids=tail_positions.expand(stop - start, -1),
                        past_key_values=cache,
                        labels=labels[start:stop],
                        fused_lm_head=True,
                    )
                logps.append(outputs.log_probs)
                if compute_entropy:
                    entropies.append(outputs.entropy)
        return torch.cat(logps), torch.cat(entropies) if compute_entropy else None
