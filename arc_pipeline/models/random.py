"""The ``random`` source: random weights of a real architecture (by default Llama-3.1-8B, the BARC model's
shape) and an offline tokenizer with the full 128,256-token Llama 3 vocabulary, the special tokens at their
real ids and the Llama 3.1 chat template: GPU smoke runs measure memory and speed at full size with no
network (``config/h200-smoke.yaml``). An optional short warm-up (arc_pipeline/models/warmup.py) makes it
answer with trivial programs, so that refinement and GRPO get data.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from arc_pipeline.models.tokenizer import (
    LLAMA3_FIRST_SPECIAL_ID,
    LLAMA3_VOCAB_SIZE,
    corpus_tasks,
    llama3_tokenizer,
    tokenizer_corpus,
)
from arc_pipeline.models.tokens import END_OF_MESSAGE_TOKEN, END_OF_TEXT_TOKEN, END_OF_TURN_TOKEN
from arc_pipeline.models.warmup import WarmupAnswerFields, warm_up, warmup_bodies

log = logging.getLogger(__name__)


class LlamaShape(BaseModel):
    """A Llama architecture; the defaults are Llama-3.1-8B's ``config.json`` (the BARC model's shape)."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(4096, ge=64, description="width of the residual stream")
    intermediate_size: int = Field(14336, ge=1, description="width of the MLP")
    num_hidden_layers: int = Field(32, ge=1, description="transformer layers")
    num_attention_heads: int = Field(32, ge=1, description="query heads")
    num_key_value_heads: int = Field(8, ge=1, description="key/value heads (grouped-query attention)")
    max_position_embeddings: int = Field(
        131072, ge=12288, description="longest context the model accepts (at least the refinement evaluation's)"
    )
    rope_theta: float = Field(500000.0, gt=0, description="RoPE base frequency")
    rope_scaling: dict[str, Any] | None = Field(
        default_factory=lambda: {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        description="Llama 3.1's long-context RoPE scaling",
    )

    @model_validator(mode="after")
    def _heads(self) -> LlamaShape:
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                "hidden_size must be a multiple of num_attention_heads, and num_attention_heads of num_key_value_heads"
            )
        return self


class RandomModelConfig(WarmupAnswerFields):
    """Random weights of a real architecture with a full-size Llama 3 tokenizer (GPU smoke runs).

    Nothing is downloaded. The tokenizer is a byte-level BPE learnt from the tasks' prompts
    (``bpe_vocab_size`` tokens), padded with never-produced filler tokens to id 127,999, then the 256
    Llama 3 special tokens at 128,000-128,255: embedding and head have the real 128,256 rows.
    """

    model_config = ConfigDict(extra="forbid")

    shape: LlamaShape = Field(default_factory=LlamaShape, description="architecture (default Llama-3.1-8B)")
    bpe_vocab_size: int = Field(8192, ge=512, le=LLAMA3_FIRST_SPECIAL_ID, description="learnt BPE tokens")
    corpus_tasks: int = Field(200, ge=1, description="at most this many tasks feed the tokenizer's training text")
    seed: int = Field(0, description="seed of the weight initialisation and the warm-up")
    dtype: Literal["float32", "bfloat16"] = Field("bfloat16", description="dtype of the weights (and the warm-up)")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where to initialise (and warm up) the weights; auto = cuda when available"
    )
    warmup_steps: int = Field(
        0, ge=0, description="answer-format warm-up steps as for the tiny model (see warm_up); 0 = random weights"
    )
    warmup_learning_rate: float = Field(
        3e-4, gt=0, description="peak AdamW learning rate of the warm-up (deep models need far less than tiny's)"
    )


def build_random_model(tasks_path: Path, output: Path, config: RandomModelConfig) -> dict[str, Any]:
    """Write random weights of ``config.shape`` and a full Llama 3 tokenizer into ``output``."""
    # read at the first CUDA allocation: the warm-up of an 8B model needs nearly all of an 80 GB card, and
    # fragmentation otherwise strands gigabytes of it
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tasks = corpus_tasks(tasks_path, config.corpus_tasks)
    shape = config.shape
    tokenizer = llama3_tokenizer(
        tokenizer_corpus(tasks, config.corpus_tasks, warmup_bodies(config.warmup_answers)),
        config.bpe_vocab_size,
        131072,
    )
    stop_tokens = (END_OF_TEXT_TOKEN, END_OF_MESSAGE_TOKEN, END_OF_TURN_TOKEN)
    stop_ids = [tokenizer.convert_tokens_to_ids(token) for token in stop_tokens]
    model_config = LlamaConfig(
        vocab_size=LLAMA3_VOCAB_SIZE,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.hidden_size // shape.num_attention_heads,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-5,
        rope_theta=shape.rope_theta,
        rope_scaling=shape.rope_scaling,
        tie_word_embeddings=False,
        hidden_act="silu",
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    device = config.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, config.dtype)
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    # Initialised on the device in the target dtype: an 8B model in float32 on a CPU takes minutes.
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(model_config)
    finally:
        torch.set_default_dtype(default_dtype)
    init_seconds = time.perf_counter() - started
    warmup: dict[str, Any] = {}
    if config.warmup_steps:
        warmup = warm_up(model, tokenizer, tasks, config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id
    )
    started = time.perf_counter()
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    save_seconds = time.perf_counter() - started
    n_params = sum(parameter.numel() for parameter in model.parameters())
    log.info(
        "random model: %d parameters (%s, %s), vocabulary %d; init %.1f s, save %.1f s",
        n_params,
        config.dtype,
        device,
        len(tokenizer),
        init_seconds,
        save_seconds,
    )
    return {
        "source": "random",
        "name": f"random-llama-{n_params / 1e9:.1f}b-seed{config.seed}",
        "tasks": str(tasks_path),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "device": device,
        "init_seconds": round(init_seconds, 2),
        "save_seconds": round(save_seconds, 2),
        "config": config.model_dump(),
        "warmup": warmup,
    }
