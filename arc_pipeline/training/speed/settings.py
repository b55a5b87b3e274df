"""Train settings of the speed levers that must agree with the rest (arc_pipeline/training/config.py checks them
with the rest of ``TrainConfig``): which need a GPU, which the unsloth backend replaces, which exclude each other."""

from __future__ import annotations

from typing import Any


def check_speed_settings(config: Any) -> None:
    """A ValueError naming the settings when a ``TrainConfig``'s kernel and backend choices disagree (typed
    ``Any``: this module is below config.py, which imports it)."""
    if config.use_cpu and (config.use_vllm or config.backend == "unsloth" or config.liger_kernels):
        raise ValueError("use_vllm, liger_kernels and the unsloth backend need a GPU: they cannot be used with use_cpu")
    if config.liger_kernels and config.backend != "trl":
        raise ValueError("liger_kernels needs backend trl (unsloth patches the model with its own kernels)")
    if config.fused_lora and config.backend != "trl":
        raise ValueError("fused_lora needs backend trl (unsloth runs its own LoRA kernels)")
    if config.fused_lora_kernels == "triton" and not (config.fused_lora and config.lora_r == 1 and not config.use_cpu):
        raise ValueError("fused_lora_kernels triton needs fused_lora: true, lora_r 1 and a GPU (not use_cpu)")
    if config.compile_layers and config.backend != "trl":
        raise ValueError("compile_layers needs backend trl (unsloth compiles its own kernels)")
    if config.compile_layers and config.torch_compile:
        raise ValueError("compile_layers and torch_compile: choose one (the layers, or the whole policy)")
    if config.compile_layers and config.fused_lora:
        # Dynamo (torch 2.13) fails to trace the fused projection's autograd function inside a compiled region:
        # "lift_tracked_freevar_to_input should not be called on root SubgraphTracer", at the first forward
        raise ValueError("compile_layers and fused_lora: choose one (torch.compile cannot trace the fused projections)")
