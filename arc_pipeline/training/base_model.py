"""What every training stage (``train``: GRPO, ``sft``) does alike before its trainer: load the base model
and its tokenizer, and undo the chat template's BOS in already-rendered prompts.

Heavy imports (torch, transformers) happen inside the functions.
"""

from __future__ import annotations

import os
from typing import Any

import polars as pl

from arc_pipeline.models.tokens import adds_bos


def load_causal_lm(model_dir: str | os.PathLike, bf16: bool) -> Any:
    """The base model for a LoRA to be put on: bf16 weights for GPU training, float32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if bf16 else torch.float32
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype)


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
