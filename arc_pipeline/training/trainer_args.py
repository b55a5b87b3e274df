"""The TRL and peft configs of a training run, from :class:`~arc_pipeline.training.config.TrainConfig`.

:func:`grpo_arguments` sets every ``GRPOConfig`` value that matters explicitly (TRL 1.x changed defaults the
published run relied on: docs/defaults.md); :func:`lora_config` is the adapter. In server mode the address of
the job's own vLLM server (:class:`VllmServer`, started by arc_pipeline/training/launch.py) goes in too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.lora_settings import LoraSettings

log = logging.getLogger(__name__)


def lora_config(config: LoraSettings) -> Any:
    """peft's LoraConfig of a fresh adapter, the same for GRPO (``train``) and SFT (``sft``)."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        use_rslora=config.use_rslora,
        bias="none",
        task_type="CAUSAL_LM",
    )


def warmup(arguments_class: type, ratio: float) -> dict[str, float]:
    """The warm-up as a share of the steps, in the name this transformers version reads: transformers 5 folded
    ``warmup_ratio`` into ``warmup_steps`` (a float below 1 is a ratio)."""
    known = {f.name for f in dataclasses.fields(arguments_class)}
    return {"warmup_ratio": ratio} if "warmup_ratio" in known else {"warmup_steps": ratio}


@dataclass(frozen=True)
class VllmServer:
    """Where the train job's own vLLM server listens (server mode; arc_pipeline/training/launch.py starts it)."""

    host: str
    port: int
    group_port: int  # the weight-sync group's rendezvous port, on the trainer's side


def grpo_arguments(
    config: TrainConfig,
    output_dir: str | os.PathLike,
    reward_weights: Sequence[float],
    server: VllmServer | None = None,
) -> Any:
    """A ``GRPOConfig`` with every value that matters set from ``config`` (no TRL default relied on).

    Keys this TRL version does not know are dropped with a warning, so the same code runs on the CPU
    (trl 1.16) and GPU (trl 1.15) environments. ``server`` is required in server mode.
    """
    from trl import GRPOConfig

    if config.vllm_mode == "server" and server is None:
        raise PipelineError(
            "train: vllm_mode 'server' needs the address of the job's vLLM server, which `arc-pipeline train` "
            "starts itself (arc_pipeline/training/launch.py); train() was called without it"
        )

    values: dict[str, Any] = {
        "output_dir": str(output_dir),
        "seed": config.seed,
        "data_seed": config.seed,
        "use_cpu": config.use_cpu,
        "bf16": config.bf16,
        "fp16": False,
        "gradient_checkpointing": config.gradient_checkpointing,
        # optimisation
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": config.lr_scheduler_type,
        "max_grad_norm": config.max_grad_norm,
        "weight_decay": config.weight_decay,
        "optim": config.optim,
        "num_train_epochs": config.num_train_epochs,
        "max_steps": config.max_steps,
        "per_device_train_batch_size": config.batch_size,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        # GRPO
        "num_generations": config.num_generations,
        "beta": config.beta,
        "loss_type": config.loss_type,
        "scale_rewards": config.scale_rewards,
        "mask_truncated_completions": config.mask_truncated_completions,
        "epsilon": config.epsilon,
        "epsilon_high": config.epsilon_high,
        "num_iterations": config.num_iterations,
        "vllm_importance_sampling_correction": config.vllm_importance_sampling_correction,
        "vllm_importance_sampling_mode": config.vllm_importance_sampling_mode,
        "vllm_importance_sampling_clip_max": config.vllm_importance_sampling_clip_max,
        "use_bias_correction_kl": config.use_bias_correction_kl,
        "reward_weights": list(reward_weights),
        "remove_unused_columns": False,
        # task_repeats > 1: the dataset is already shuffled and holds each task's repeats in a row, which
        # TRL's sampler must keep together to put them in one generation batch
        "shuffle_dataset": config.task_repeats == 1,
        # sampling
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "min_p": None,
        "repetition_penalty": config.repetition_penalty,
        "max_completion_length": config.max_completion_length,
        "use_vllm": config.use_vllm,
        "vllm_mode": config.vllm_mode,
        "vllm_gpu_memory_utilization": config.vllm_gpu_memory_utilization,
        "vllm_enable_sleep_mode": config.vllm_enable_sleep_mode,
        "torch_compile": config.torch_compile,
        "vllm_max_model_length": config.max_seq_length,
        # checkpoints and logging
        "save_strategy": "steps",
        "save_steps": config.save_steps,
        "save_total_limit": config.save_total_limit,
        "save_only_model": False,  # optimizer and RNG states are needed to resume
        "logging_strategy": "steps",
        "logging_steps": config.logging_steps,
        "report_to": list(config.report_to) or "none",
        "run_name": config.run_name or Path(output_dir).name,
        "log_completions": config.log_completions,
        "disable_tqdm": False,
    }
    if server is not None:
        values.update(
            vllm_server_host=server.host,
            vllm_server_port=server.port,
            vllm_group_port=server.group_port,
            vllm_server_timeout=config.vllm_server_timeout_s,
        )
    if config.use_cpu and config.training_processes > 1:
        values["ddp_backend"] = "gloo"  # CPU processes: NCCL needs GPUs
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    values.update(warmup(GRPOConfig, config.warmup_ratio))
    unknown = sorted(set(values) - known)
    # these change what is learned (docs/reproduction.md): never drop them silently
    required = {
        "vllm_importance_sampling_correction",
        "vllm_importance_sampling_mode",
        "vllm_importance_sampling_clip_max",
        "use_bias_correction_kl",
        "optim",
    } & set(unknown)
    if required:
        raise PipelineError(f"train: this TRL version has no GRPOConfig fields {sorted(required)}; install trl>=1.15")
    if unknown:
        log.warning("this TRL version has no GRPOConfig fields %s: left out", unknown)
    return GRPOConfig(**{key: value for key, value in values.items() if key in known})
