"""``train.vllm_quantization``: the colocated rollout engine holds the policy's weights quantized (``fp8``: vLLM's
online fp8 quantization) while the policy itself trains in bfloat16.

Each decoding step (one token for each of the step's sequences) reads every weight once, so the engine's weight
bytes bound much of the generation phase, the largest phase of the preset's step (benchmarks/README.md); fp8
halves them. Two things in TRL's colocated engine assume unquantized weights, and this module replaces them:

- TRL builds the engine with ``quantization=None`` (bitsandbytes models aside): ``rollout_engine.py`` hands vLLM
  the setting while the trainer is constructed;
- TRL's weight sync writes each bfloat16 tensor into the engine's parameter with ``load_weights``, which would
  put bfloat16 values in fp8 storage: :func:`sync_by_reload` routes the sync through vLLM's in-place reload
  (``reload_weights(weights_iterator=..., is_checkpoint_format=True)``), which gathers each layer's new weights,
  quantizes them again and copies the result into the tensors the engine's CUDA graphs hold.

The completions are then sampled from the quantized policy. TRL's importance-sampling correction (on in the
presets) reweights each token by the trainer's probability over the sampler's, the mismatch fp8 adds included;
whether the run still learns what the bfloat16 engine learns is the GPU canary's question (docs/canary.md), so
the setting is off in the presets until the canary says so.
"""

from __future__ import annotations

from typing import Any

from arc_pipeline.errors import PipelineError


def with_quantization(engine_kwargs: dict[str, Any], quantization: str) -> dict[str, Any]:
    """TRL's engine arguments with vLLM's ``quantization`` set; an error if TRL chose another one (a model
    quantized with bitsandbytes, whose weights vLLM loads as such)."""
    chosen = engine_kwargs.get("quantization")
    if chosen not in (None, quantization):
        raise PipelineError(
            f"train: vllm_quantization {quantization!r}: TRL builds the rollout engine with quantization "
            f"{chosen!r} for this model; leave vllm_quantization at none"
        )
    return {**engine_kwargs, "quantization": quantization}


def sync_by_reload(engine: Any) -> None:
    """Make ``engine`` (TRL's colocated ``vllm_generation``: its ``llm`` and its ``_iter_named_params``, the
    policy's weights with the adapter merged under vLLM's names) sync through vLLM's in-place reload, which
    quantizes each layer's new weights again."""

    def sync_weights() -> None:
        runner = engine.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=engine._iter_named_params(), is_checkpoint_format=True)
        engine.llm.reset_prefix_cache()

    engine.sync_weights = sync_weights
