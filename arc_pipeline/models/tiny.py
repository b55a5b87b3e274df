"""The ``tiny`` source: a tiny Llama (``LlamaForCausalLM``) for CPU runs, with its own small tokenizer.

Built in well under a minute from the prompts of the given tasks, then given the answer-format warm-up
(arc_pipeline/models/warmup.py), so that the whole workflow runs offline on a CPU with the same code paths
as the real model and every stage gets data (parsed programs, valid and invalid outputs, reward variance).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from arc_pipeline.models.tokenizer import corpus_tasks, tokenizer_corpus, train_tokenizer
from arc_pipeline.models.tokens import END_OF_MESSAGE_TOKEN, END_OF_TEXT_TOKEN, END_OF_TURN_TOKEN
from arc_pipeline.models.warmup import WarmupAnswerFields, warm_up, warmup_bodies

log = logging.getLogger(__name__)

VLLM_CPU_HEAD_SIZE = 64  # vLLM's CPU attention kernels reject small heads (16 fails, 64 works)


class TinyModelConfig(WarmupAnswerFields):
    """A tiny Llama for CPU runs, shaped like Llama 3.1 (GQA, untied head, RoPE 500k).

    Its weights are random, then (unless ``warmup_steps`` is 0) briefly fine-tuned to answer every
    prompt with a short BARC-style program (see :func:`warm_up`), so that a default run has parseable
    programs, valid and invalid outputs and reward variance in every stage.
    """

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(128, ge=64, description="model width; hidden_size / num_attention_heads must be 64")
    num_hidden_layers: int = Field(2, ge=1, description="transformer blocks")
    num_attention_heads: int = Field(2, ge=1, description="query heads (head size 64: vLLM's CPU kernels need it)")
    num_key_value_heads: int = Field(1, ge=1, description="key/value heads (grouped-query attention, as Llama 3.1)")
    intermediate_size: int = Field(512, ge=1, description="MLP width")
    vocab_size: int = Field(
        4096, ge=512, description="target size of the BPE vocabulary; the model's embedding gets the size reached"
    )
    seed: int = Field(0, description="seed of the weight initialisation")
    max_position_embeddings: int = Field(
        16384, ge=12288, description="context length; prompts reach ~8.6k tokens with the real tokenizer"
    )
    corpus_tasks: int = Field(200, ge=1, description="at most this many tasks feed the tokenizer's training text")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="dtype of the saved weights")
    warmup_steps: int = Field(
        200,
        ge=0,
        description="answer-format warm-up: optimizer steps teaching the model to answer with a short fenced "
        "program ending its turn (a random variant of WARMUP_BODIES); 0 = keep the random weights",
    )
    warmup_learning_rate: float = Field(
        5e-3, gt=0, description="peak AdamW learning rate of the warm-up (10% linear ramp, then linear decay)"
    )

    @model_validator(mode="after")
    def _head_size(self) -> TinyModelConfig:
        if self.hidden_size != VLLM_CPU_HEAD_SIZE * self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) / num_attention_heads ({self.num_attention_heads}) must be "
                f"{VLLM_CPU_HEAD_SIZE}: vLLM's CPU attention rejects other head sizes"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        return self


def build_tiny_model(tasks_path: Path, output: Path, config: TinyModelConfig) -> dict[str, Any]:
    """Write a random tiny Llama and its tokenizer into ``output``; return the provenance."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tasks = corpus_tasks(tasks_path, config.corpus_tasks)
    corpus = tokenizer_corpus(tasks, config.corpus_tasks, warmup_bodies(config.warmup_answers))
    tokenizer = train_tokenizer(corpus, config.vocab_size, config.max_position_embeddings)
    # Like Llama 3.1's generation config: end of turn, end of text and end of message all stop.
    stop_tokens = (END_OF_TURN_TOKEN, END_OF_TEXT_TOKEN, END_OF_MESSAGE_TOKEN)
    stop_ids = [tokenizer.convert_tokens_to_ids(token) for token in stop_tokens]
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=VLLM_CPU_HEAD_SIZE,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stop_ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(config.seed)
    model = LlamaForCausalLM(model_config)
    warmup: dict[str, Any] = {}
    if config.warmup_steps:
        warmup = warm_up(model, tokenizer, tasks, config)
    model = model.to(getattr(torch, config.dtype))
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    n_params = sum(parameter.numel() for parameter in model.parameters())
    log.info("tiny model: %d parameters, vocabulary %d, from %d tasks", n_params, len(tokenizer), len(tasks))
    return {
        "source": "tiny",
        "name": f"tiny-llama-seed{config.seed}",
        "tasks": str(tasks_path),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "config": config.model_dump(),
        "warmup": warmup,
    }
