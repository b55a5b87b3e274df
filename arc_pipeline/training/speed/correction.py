"""vLLM importance-sampling correction from the loss's own forward (``train.importance_sampling_from_loss_forward``).

With ``vllm_importance_sampling_correction`` TRL weights each completion token of the loss by
``pi_current / pi_vllm``: vLLM's sampling log-probs against the current policy's, which TRL computes in a separate
forward pass without gradient while it prepares the generation batch (``_generate_and_score_completions``). When
each generation batch is trained once (``num_iterations`` 1, one generation per optimizer step), the policy of
that forward is the one the loss's forward runs a moment later with the same weights, so the loss's own
log-probs, detached, give the same ratio: TRL itself takes them as the "old" log-probs in that case. This module
drops the separate forward (a fifth to a quarter of a training process's step with full-length completions,
benchmarks/README.md) and fills in the ratio inside the loss:

* while TRL prepares the generation batch, its correction flag is off, so it neither runs the forward nor
  computes the ratio (vLLM's sampling log-probs still come back: TRL always asks for them);
* in each loss computation (each chunk, with arc_pipeline/training/speed/chunked_backward.py), the first forward with
  gradient gives the current log-probs; the ratio is computed from them, detached, exactly as TRL computes it
  (per token or per sequence, truncated or masked at the clip bounds), and put where TRL's loss reads it.

The ratio's mean, min and max over this process's tokens are logged like TRL's (``sampling/...``), per loss
computation, this process's own.
"""

from __future__ import annotations

import math
from typing import Any

RATIO_KEY = "importance_sampling_ratio"
SAMPLING_KEY = "sampling_per_token_logps"


def importance_ratio(
    current: Any, sampling: Any, mask: Any, mode: str, clip_min: float | None, clip_max: float | None
) -> Any:
    """TRL's vLLM importance-sampling ratio: ``(B, T)`` for the ``token_*`` modes, ``(B, 1)`` for ``sequence_*``;
    truncated to the bounds (``*_truncate``) or zero outside them (``*_mask``). A NaN sampling log-prob (vLLM
    returned none) counts as no difference."""
    import torch

    difference = torch.nan_to_num((current - sampling) * mask, nan=0.0)
    if mode.startswith("sequence"):
        difference = difference.sum(dim=-1, keepdim=True)
    ratio = torch.exp(difference)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode.endswith("mask"):
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}")


class CorrectionFromLossForward:
    """Attach to a TRL ``GRPOTrainer`` with :meth:`attach` before the chunked backward (which captures
    ``compute_loss``; this wraps ``_compute_loss``, which TRL's ``compute_loss`` calls)."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.skipped_forwards = 0  # generation batches prepared without TRL's separate forward
        self.ratios_filled = 0

    def attach(self, trainer: Any) -> CorrectionFromLossForward:
        if not (getattr(trainer, "use_vllm", False) and trainer.vllm_importance_sampling_correction):
            raise ValueError(
                "importance_sampling_from_loss_forward needs use_vllm and the importance-sampling correction"
            )
        if trainer.num_iterations != 1:
            raise ValueError("importance_sampling_from_loss_forward needs num_iterations 1")
        if trainer.loss_type == "vespo":
            raise ValueError("importance_sampling_from_loss_forward: TRL's vespo loss uses the ratio in its own way")
        self.trainer = trainer
        inner_prepare = trainer._generate_and_score_completions
        inner_loss = trainer._compute_loss

        def generate_and_score(*args: Any, **kwargs: Any) -> Any:
            trainer.vllm_importance_sampling_correction = False
            try:
                output = inner_prepare(*args, **kwargs)
            finally:
                trainer.vllm_importance_sampling_correction = True
            self.skipped_forwards += 1
            return output

        def compute_loss(model: Any, inputs: dict[str, Any]) -> Any:
            if RATIO_KEY in inputs or inputs.get(SAMPLING_KEY) is None:
                return inner_loss(model, inputs)
            return self._with_ratio(inner_loss, model, dict(inputs))

        trainer._generate_and_score_completions = generate_and_score
        trainer._compute_loss = compute_loss
        return self

    def _with_ratio(self, inner_loss: Any, model: Any, inputs: dict[str, Any]) -> Any:
        """TRL's loss of ``inputs`` (a copy), the ratio put into it by the loss's first forward with gradient."""
        import torch

        trainer = self.trainer
        had_own = "_get_per_token_logps_and_entropies" in vars(trainer)
        forward = trainer._get_per_token_logps_and_entropies

        def forward_filling_ratio(*args: Any, **kwargs: Any) -> Any:
            output = forward(*args, **kwargs)
            if torch.is_grad_enabled() and RATIO_KEY not in inputs:
                inputs[RATIO_KEY] = self._ratio(output[0].detach(), inputs)
            return output

        trainer._get_per_token_logps_and_entropies = forward_filling_ratio
        try:
            return inner_loss(model, inputs)
        finally:
            if had_own:
                trainer._get_per_token_logps_and_entropies = forward
            else:
                del trainer._get_per_token_logps_and_entropies

    def _ratio(self, current: Any, inputs: dict[str, Any]) -> Any:
        trainer = self.trainer
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        ratio = importance_ratio(
            current,
            inputs[SAMPLING_KEY],
            mask,
            trainer.vllm_importance_sampling_mode,
            trainer.vllm_importance_sampling_clip_min,
            trainer.vllm_importance_sampling_clip_max,
        )
        self.ratios_filled += 1
        self._log(ratio, mask)
        return ratio

    def _log(self, ratio: Any, mask: Any) -> None:
        per_sequence = self.trainer.vllm_importance_sampling_mode.startswith("sequence")
        values = ratio.flatten() if per_sequence else ratio[mask.bool()]
        if values.numel() == 0:
            return
        metrics = self.trainer._metrics["train"]
        metrics["sampling/importance_sampling_ratio/min"].append(values.min().item())
        metrics["sampling/importance_sampling_ratio/mean"].append(values.mean().item())
        metrics["sampling/importance_sampling_ratio/max"].append(values.max().item())
