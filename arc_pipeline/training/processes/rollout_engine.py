"""TRL's colocated rollout engine, built with the vLLM arguments the train settings add to TRL's own.

TRL constructs the engine itself (``trl.generation.vllm_generation.LLM``) from a fixed set of its arguments;
:func:`engine_built_with` hands vLLM the extra ones while the trainer is constructed:

- ``train.vllm_quantization``: the weights in fp8 (``quantized_rollouts.py`` keeps them in sync);
- ``train.vllm_kv_cache_dtype``: keys and values in fp8, half the bytes a decode step reads for the 32
  sequences' 2,000-token shared prompt and their completions;
- ``train.vllm_cascade_attention``: vLLM 0.31's cascade attention. Every completion of a GRPO step answers the
  same prompt (one task per step, ``num_generations`` samples), so every running sequence shares a prefix of the
  prompt's length (about 2,000 tokens in the preset). Cascade attention reads that prefix's keys and values once
  per decoding step for all sequences, instead of once per sequence; vLLM decides per step by its cost model,
  which for 32 sequences sharing 2,048 tokens (whole cache blocks) with Llama-3-8B's 32 query and 8 key-value
  heads on 132 SMs picks it (16 against 32 in the model's units). The same attention, computed in two parts and
  merged, so the samples differ from the default kernel's only by rounding; vLLM keeps it off by default, and a
  step that uses it runs piecewise CUDA graphs instead of full ones. vLLM 0.32 removed it (then ignored). Only
  vLLM's V1 model runner builds it, so the engine is built with that runner (``engine_args.lever_environment``).
  Measured on an H200 (vLLM 0.31, benchmarks/README.md, 2026-11-30): the step's generation took 20.5 s against
  8.4 s with that runner alone; the lost full CUDA graph costs more than the prefix's reads save. Off;
- ``train.overlap_request_steps`` above 1 with ``overlap_generation``: one request holds that many steps'
  completions (arc_pipeline/training/processes/overlap.py), but TRL sizes the engine's batch for one step's
  (``max_num_seqs``: the per-device batch x ``steps_per_generation``), so a two-step request would decode in two
  waves, one after the other, and the longer batch would save nothing; the engine gets room for all of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arc_pipeline.generation.engine_args import lever_environment
from arc_pipeline.training.processes.quantized_rollouts import with_quantization

log = logging.getLogger(__name__)


def engine_overrides(config: Any) -> dict[str, Any]:
    """The vLLM arguments a ``TrainConfig`` adds to those TRL builds the colocated engine with ({}: TRL's as they
    are; typed ``Any``: this module is below config.py)."""
    overrides: dict[str, Any] = {}
    if config.vllm_quantization != "none":
        overrides["quantization"] = config.vllm_quantization
    if config.vllm_kv_cache_dtype != "auto":
        overrides["kv_cache_dtype"] = config.vllm_kv_cache_dtype
    if config.vllm_cascade_attention:
        overrides["disable_cascade_attn"] = False  # vLLM's flag is the negation
    if config.vllm_mode == "colocate" and config.overlap_generation and config.overlap_request_steps > 1:
        # TRL's own: batch x steps_per_generation, which TRL sets to gradient_accumulation_steps
        one_step = config.batch_size * config.gradient_accumulation_steps
        overrides["max_num_seqs"] = one_step * config.overlap_request_steps
    return overrides


@contextmanager
def engine_built_with(overrides: dict[str, Any]) -> Iterator[None]:
    """While the trainer is constructed, TRL's colocated engine is built with ``overrides`` on top of TRL's own
    arguments (a quantization TRL chose itself is an error, :func:`with_quantization`)."""
    if not overrides:
        yield
        return
    from trl.generation import vllm_generation

    build = vllm_generation.LLM

    def build_with_overrides(*args: Any, **kwargs: Any) -> Any:
        environment = lever_environment(overrides.get("disable_cascade_attn") is False)
        os.environ.update(environment)  # kept: TRL's engine lives as long as this training process
        log.info("rollout engine: vLLM arguments beyond TRL's: %s %s", overrides, environment or "")
        if "quantization" in overrides:
            kwargs = with_quantization(kwargs, overrides["quantization"])
        return build(*args, **{**kwargs, **overrides})

    vllm_generation.LLM = build_with_overrides
    try:
        yield
    finally:
        vllm_generation.LLM = build
