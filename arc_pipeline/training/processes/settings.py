"""Train settings about processes, GPUs and generation beside training that must agree with each other
(arc_pipeline/training/config.py checks them with the rest of ``TrainConfig``; docs/multi-gpu.md)."""

from __future__ import annotations

from typing import Any


def check_process_settings(config: Any) -> None:
    """A ValueError naming the settings when a ``TrainConfig``'s layout, overlap or correction settings disagree
    (typed ``Any``: this module is below config.py, which imports it)."""
    if config.vllm_mode == "server" and not config.use_vllm:
        raise ValueError("vllm_mode 'server' generates with a vLLM server: set use_vllm true or vllm_mode colocate")
    if config.vllm_mode == "server" and config.vllm_enable_sleep_mode:
        raise ValueError("vllm_enable_sleep_mode is for vllm_mode colocate: the server owns its GPUs")
    if config.overlap_generation:
        _require(
            "overlap_generation",
            {
                "use_vllm: true (the engine decodes while the policy trains)": config.use_vllm,
                "vllm_enable_sleep_mode: false (a sleeping engine drops its weights between steps)": (
                    not config.vllm_enable_sleep_mode
                ),
                "vllm_importance_sampling_correction: true (it reweights the completions sampled with older "
                "weights)": config.vllm_importance_sampling_correction,
                "online_multi_turn: false (its rollout generates turn by turn)": not config.online_multi_turn,
            },
        )
    if config.overlap_request_steps > 1 and not config.overlap_generation:
        raise ValueError("overlap_request_steps > 1 needs overlap_generation: true")
    if not config.overlap_decode_ahead and not (config.overlap_generation and config.overlap_request_steps > 1):
        raise ValueError(
            "overlap_decode_ahead: false decodes overlap_request_steps steps' completions in one request when the "
            "first of them is needed: it needs overlap_generation: true and overlap_request_steps > 1"
        )
    if config.overlap_training_first and not (config.overlap_generation and config.vllm_mode == "colocate"):
        raise ValueError(
            "overlap_training_first orders the colocated engine's stream and training's on one GPU: it needs "
            "overlap_generation: true and vllm_mode colocate"
        )
    if config.overlap_switch_interval_ms is not None and not config.overlap_generation:
        raise ValueError(
            "overlap_switch_interval_ms needs overlap_generation: true (it paces the training and decoding threads)"
        )
    if config.importance_sampling_from_loss_forward:
        _require(
            "importance_sampling_from_loss_forward",
            {
                "vllm_importance_sampling_correction: true": config.vllm_importance_sampling_correction,
                "num_iterations: 1 (with more passes the old policy is not the one being trained)": (
                    config.num_iterations == 1
                ),
                "backend trl (unsloth computes its own loss)": config.backend == "trl",
            },
        )
    if config.vllm_quantization != "none":
        _require(
            f"vllm_quantization {config.vllm_quantization!r}",
            {
                **_trls_colocated_engine(config),
                "vllm_enable_sleep_mode: false (a sleeping engine drops the weights the reload requantizes)": (
                    not config.vllm_enable_sleep_mode
                ),
                "vllm_importance_sampling_correction: true (it reweights for the quantized sampler)": (
                    config.vllm_importance_sampling_correction
                ),
            },
        )
    if config.vllm_kv_cache_dtype != "auto":
        _require(
            f"vllm_kv_cache_dtype {config.vllm_kv_cache_dtype!r}",
            {
                **_trls_colocated_engine(config),
                "vllm_importance_sampling_correction: true (it reweights for the fp8 cache's sampler)": (
                    config.vllm_importance_sampling_correction
                ),
            },
        )
    if config.vllm_cascade_attention:
        _require("vllm_cascade_attention", _trls_colocated_engine(config))
    if config.vllm_server_gpus % config.vllm_server_tensor_parallel_size:
        raise ValueError(
            f"vllm_server_gpus ({config.vllm_server_gpus}) must be a multiple of vllm_server_tensor_parallel_size "
            f"({config.vllm_server_tensor_parallel_size})"
        )
    if config.backend == "unsloth" and config.backward_chunk_tokens is not None:
        raise ValueError("backward_chunk_tokens is for backend trl: unsloth computes its own GRPO loss")
    if config.backend == "unsloth" and config.launched:
        raise ValueError("training_processes > 1 and vllm_mode 'server' need backend trl (unsloth: one GPU)")


def _trls_colocated_engine(config: Any) -> dict[str, bool]:
    """The needs of a setting that changes the vLLM engine TRL builds in the training process (rollout_engine.py)."""
    return {
        "use_vllm: true and vllm_mode 'colocate' (the engine in the training process)": (
            config.use_vllm and config.vllm_mode == "colocate"
        ),
        "backend trl (unsloth runs its own engine)": config.backend == "trl",
    }


def _require(setting: str, needs: dict[str, bool]) -> None:
    """A ValueError naming every unmet need of ``setting``."""
    missing = [need for need, met in needs.items() if not met]
    if missing:
        raise ValueError(f"{setting} needs {'; '.join(missing)}")
