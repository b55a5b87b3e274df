"""What every training stage (``train``: GRPO, ``sft``) does alike before its trainer: load the base model
and its tokenizer, and undo the chat template's BOS in already-rendered prompts.

Heavy imports (torch, transformers) happen inside the functions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import polars as pl

from arc_pipeline.errors import PipelineError
from arc_pipeline.models.tokens import adds_bos
from arc_pipeline.training.lora_settings import LoraSettings


def load_causal_lm(model_dir: str | os.PathLike, bf16: bool) -> Any:
    """The base model for a LoRA to be put on: bf16 weights for GPU training, float32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if bf16 else torch.float32
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)


def continue_adapter(model: Any, adapter_dir: str | os.PathLike, lora: LoraSettings) -> Any:
    """``model`` with a trained adapter (the sft stage's) put back on, trainable: the run continues it
    instead of a fresh LoRA. Its shape must be ``lora``'s, or the run would silently train another adapter
    than its config says."""
    from peft import PeftModel

    path = Path(adapter_dir) / "adapter_config.json"
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PipelineError(f"{path}: not a readable adapter config ({error})") from None
    expected = {"r": lora.lora_r, "lora_alpha": lora.lora_alpha, "use_rslora": lora.use_rslora}
    found = {key: saved.get(key) for key in expected}
    if found != expected or set(saved.get("target_modules") or []) != set(lora.lora_target_modules):
        raise PipelineError(
            f"{path}: the adapter's shape {found} on {sorted(saved.get('target_modules') or [])} is not the config's "
            f"{expected} on {sorted(lora.lora_target_modules)}: give sft and train the same lora_* settings"
        )
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)


def strip_rendered_bos(frame: pl.DataFrame, tokenizer: Any, double_bos: bool, column: str = "prompt") -> pl.DataFrame:
    """``column`` (already rendered with the chat template, so beginning with BOS) without that BOS when
    the tokenizer adds one itself: TRL tokenizes a raw-text prompt with ``tokenizer(text)``, which for
    Llama tokenizers prepends BOS again. ``double_bos`` keeps it (the published run's two BOS tokens)."""
    if double_bos or not adds_bos(tokenizer):
        return frame
    bos = tokenizer.bos_token
    return frame.with_columns(
        pl.when(pl.col(column).str.starts_with(bos))
        .then(pl.col(column).str.slice(len(bos)))
        .otherwise(pl.col(column))
        .alias(column)
    )
