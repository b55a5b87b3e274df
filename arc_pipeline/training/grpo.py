"""GRPO training of the refinement LoRA with TRL (or Unsloth), resumable after a kill.

What happens, in order: the refinement parquet becomes a standard (raw-text) prompt dataset whose
extra columns carry the augmented task for the reward; the base model gets a LoRA (peft); TRL's
``GRPOTrainer`` samples ``num_generations`` completions per prompt, executes them in a shared
sandbox and scores them; checkpoints go to a folder beside the output every ``save_steps`` and a
rerun resumes from the last one (unless the config, data or model changed: those are moved aside and
it starts afresh; arc_pipeline/training/checkpoints.py).
The output is the final adapter folder (or the best checkpoint before a collapse) plus the per-step
metrics parquet.

Heavy imports (torch, transformers, TRL) happen inside functions: Unsloth must be imported before
them to patch them, and light CLI commands should not pay for them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arc_pipeline.errors import PipelineError
from arc_pipeline.io import InputFileError, read_frame, share_like_umask, write_table
from arc_pipeline.models.tokens import stop_token_ids
from arc_pipeline.schemas import REFINEMENT_SCHEMA, TRAINING_METRICS_SCHEMA
from arc_pipeline.training.base_model import continue_adapter, load_causal_lm, strip_rendered_bos
from arc_pipeline.training.checkpoints import (
    best_checkpoint,
    default_checkpoint_dir,
    fingerprint_defaults,
    last_complete_checkpoint,
    model_content_digest,
    prepare_checkpoint_dir,
    reached_the_end,
    run_fingerprint,
    write_adapter,
)
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.processes.ports import claim_rendezvous_port
from arc_pipeline.training.trainer_args import VllmServer, grpo_arguments, lora_config

log = logging.getLogger(__name__)

# Columns handed to the trainer: the prompt plus what the reward needs (and ids for the logs).
DATASET_COLUMNS = [
    "prompt",
    "task_id",
    "prediction_id",
    "train_inputs",
    "train_outputs",
    "test_inputs",
    "test_outputs",
    "test_index",
]


# ------------------------------------------------------------------ dataset


def load_refinement_dataset(path: str | os.PathLike, tokenizer: Any, config: TrainConfig) -> tuple[Any, dict]:
    """The refinement parquet as a ``datasets.Dataset`` of raw-text prompts, and counts.

    The ``prompt`` column is already rendered with the chat template, so it is a *standard* (not
    conversational) prompt: TRL tokenizes it with ``tokenizer(text)``. That call adds BOS again for
    Llama tokenizers, so the rendered BOS is stripped here (kept with ``double_bos``, which reproduces
    the published run's two BOS tokens). Prompts longer than ``max_seq_length - max_completion_length``
    are dropped (TRL 1.x no longer truncates prompts). With ``task_repeats`` k > 1 the rows are
    shuffled once with the seed and each is repeated k times in a row; TRL's sampler then walks them in
    order (see :func:`grpo_arguments`), so one generation batch holds k groups of the same task.
    """
    import polars as pl
    from datasets import Dataset

    frame = read_frame(path, REFINEMENT_SCHEMA)
    total = frame.height
    frame = frame.filter(pl.col("prompt_tokens") <= config.max_prompt_tokens)
    dropped = total - frame.height
    if dropped:
        log.warning(
            "%s: dropped %d of %d prompts longer than %d tokens", path, dropped, total, config.max_prompt_tokens
        )
    if frame.height == 0:
        raise InputFileError(f"{path}: no refinement prompt to train on ({total} rows, {dropped} too long)")
    frame = strip_rendered_bos(frame, tokenizer, config.double_bos).select(DATASET_COLUMNS)
    if config.task_repeats > 1:
        frame = frame.sample(fraction=1.0, shuffle=True, seed=config.seed)
        frame = frame.select(pl.all().repeat_by(config.task_repeats)).explode(pl.all())
    dataset = Dataset.from_polars(frame)
    return dataset, {"rows": total, "dropped_too_long": dropped, "kept": total - dropped}


# ------------------------------------------------------------------ model and trainer configuration


def load_model(
    config: TrainConfig, model_dir: str | os.PathLike, init_adapter: str | os.PathLike | None = None
) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, peft_config)``: for ``trl`` a plain model and a LoRA config for TRL to apply,
    for ``unsloth`` Unsloth's model with its LoRA already attached (peft_config None); with ``init_adapter``
    the model with that trained adapter on, trainable (peft_config None)."""
    from arc_pipeline.models.folder import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    tokenizer.padding_side = "left"
    if config.backend == "unsloth":
        return _load_unsloth_model(config, model_dir), tokenizer, None
    model = load_causal_lm(model_dir, config.bf16)
    if config.liger_kernels:
        apply_liger_kernels(model)
    if init_adapter is not None:
        return continue_adapter(model, init_adapter, config), tokenizer, None
    return model, tokenizer, lora_config(config)


def apply_liger_kernels(model: Any) -> None:
    """Swap ``model``'s RMSNorm, SwiGLU MLP and rotary embedding for Liger's Triton kernels, in place (before
    the LoRA goes on: the MLP keeps its projections, so the LoRA layers wrap them as usual). Liger's fused
    linear cross-entropy stays off: the project computes the log-probs itself. ``train`` has checked for a GPU."""
    model_type = getattr(model.config, "model_type", None)
    if model_type != "llama":
        raise PipelineError(f"train: liger_kernels is wired for Llama models, and this one is {model_type!r}")
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
    except ImportError as error:
        raise PipelineError(
            f"train: liger_kernels needs the liger-kernel package ({error}); install the gpu extra: "
            "pip install -e '.[gpu]'"
        ) from None
    apply_liger_kernel_to_llama(
        rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False, model=model
    )
    log.info("liger_kernels: Liger's RMSNorm, SwiGLU and RoPE kernels in the policy")


def _import_unsloth() -> Any:
    try:
        import unsloth  # noqa: F401  (must come before transformers/trl to patch them)
        from unsloth import FastLanguageModel
    except ImportError as error:
        raise PipelineError(
            f"train: backend 'unsloth' needs the unsloth package, which runs on NVIDIA GPUs only ({error}). "
            "Install it with pip install 'arc-pipeline[gpu,unsloth]' on a GPU node, or use backend: trl."
        ) from None
    return FastLanguageModel


def _load_unsloth_model(config: TrainConfig, model_dir: str | os.PathLike) -> Any:
    fast_language_model = _import_unsloth()
    model, _ = fast_language_model.from_pretrained(
        model_name=str(model_dir),
        max_seq_length=config.max_seq_length,
        load_in_4bit=False,  # published run: unquantized trained twice as fast
        fast_inference=config.use_vllm,
        max_lora_rank=config.lora_r,
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
    )
    return fast_language_model.get_peft_model(
        model,
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        use_rslora=config.use_rslora,
        use_gradient_checkpointing="unsloth" if config.gradient_checkpointing else False,
        random_state=config.seed,
    )


# ------------------------------------------------------------------ the run


@dataclass
class TrainResult:
    global_step: int
    resumed_from: str | None
    stopped_by_guard: bool
    kept_checkpoint: str | None
    dataset: dict = field(default_factory=dict)


def train(
    config: TrainConfig,
    dataset_path: str | os.PathLike,
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    metrics_path: str | os.PathLike,
    checkpoint_dir: str | os.PathLike | None = None,
    extra_rewards: Sequence[tuple[Callable[..., list[float]], float]] = (),
    callbacks: Sequence[Any] = (),
    server: VllmServer | None = None,
    rank_process: bool = False,
    init_adapter: str | os.PathLike | None = None,
) -> TrainResult:
    """Train (or resume), then write the adapter folder ``output`` and the metrics parquet.

    ``extra_rewards`` are ``(reward function, weight)`` pairs added to the ARC reward (tests use a
    learnable one); ``callbacks`` are extra ``TrainerCallback`` objects; ``init_adapter``: the trained adapter
    to continue instead of a fresh LoRA (``init_adapter: sft``). ``rank_process``: this is one of
    the processes arc_pipeline/training/launch.py started, which has already prepared the checkpoint
    folder (and handled a finished run); ``server`` is its vLLM server in server mode.
    """
    if config.backend == "unsloth":
        _import_unsloth()
    gpu_settings = [
        name
        for name, on in (
            ("use_vllm", config.use_vllm),
            ("backend unsloth", config.backend == "unsloth"),
            ("liger_kernels", config.liger_kernels),
        )
        if on
    ]
    if gpu_settings:
        import torch

        if not torch.cuda.is_available():
            raise PipelineError(
                f"train: {', '.join(gpu_settings)}: these settings need a CUDA GPU, and none is visible"
            )
    from trl import GRPOTrainer

    from arc_pipeline.sandbox import Sandbox, SandboxConfig
    from arc_pipeline.scoring.rules import max_output_side
    from arc_pipeline.training.callbacks import CollapseGuard, LiveMetrics, metrics_rows
    from arc_pipeline.training.phases import PhaseTimer
    from arc_pipeline.training.processes.overlap import OverlappedGeneration
    from arc_pipeline.training.processes.preemption import CheckpointOnSigterm
    from arc_pipeline.training.processes.quantized_rollouts import sync_by_reload
    from arc_pipeline.training.processes.rollout_engine import engine_built_with, engine_overrides
    from arc_pipeline.training.processes.weight_sync import release_stranded_sync_buffers
    from arc_pipeline.training.rewards import ArcReward, soft_overlong_penalty
    from arc_pipeline.training.speed.chunked_backward import ChunkedBackward
    from arc_pipeline.training.speed.compiled_layers import compile_decoder_layers
    from arc_pipeline.training.speed.correction import CorrectionFromLossForward
    from arc_pipeline.training.speed.fused_lora import fuse_lora_projections
    from arc_pipeline.training.speed.shared_prompt import SharedPromptForward
    from arc_pipeline.training.speed.shared_prompt_generation import SharedPromptGeneration

    output = Path(output)
    checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir(output)
    if rank_process:
        # read only: every rank writing the fingerprint marker at once could let one read it half written
        resume = last_complete_checkpoint(checkpoint_dir)
        if resume is not None:
            log.info("resuming from %s", resume)
    else:
        resume, finished = prepare_run(
            config, dataset_path, model_dir, output, metrics_path, checkpoint_dir, init_adapter
        )
        if finished is not None:
            return finished
        if config.use_vllm and config.vllm_mode == "colocate":
            claim_rendezvous_port()  # the colocated engine's group: a port of its own, never TRL's fixed 29500
    model, tokenizer, peft_config = load_model(config, model_dir, init_adapter)
    dataset, dataset_counts = load_refinement_dataset(dataset_path, tokenizer, config)
    guard = CollapseGuard(config.collapse_guard)
    phases = PhaseTimer()
    sandbox_config = SandboxConfig(
        workers=config.reward_workers(),
        timeout_s=config.execution_timeout_s,
        memory_mb=config.execution_memory_mb,
        max_output_side=max_output_side(config.execution_rules),
    )
    with Sandbox(sandbox_config) as sandbox:
        arc_reward: Callable[..., list[float]] = ArcReward(
            config.reward, sandbox, stop_token_ids(model, tokenizer), config.truncated_reward, config.execution_rules
        )
        rollout = None
        if config.online_multi_turn:
            from arc_pipeline.training.online import FinalTurnReward, OnlineRollout

            rollout = OnlineRollout(sandbox, stop_token_ids(model, tokenizer), config.execution_rules)
            arc_reward = FinalTurnReward(arc_reward)
        rewards: list[tuple[Callable[..., list[float]], float]] = [(arc_reward, 1.0)]
        if config.soft_overlong_cache:
            penalty = soft_overlong_penalty(config.max_completion_length, config.soft_overlong_cache)
            rewards.append((penalty, config.soft_overlong_weight))
        rewards.extend(extra_rewards)
        with engine_built_with(engine_overrides(config)):
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=[func for func, _ in rewards],
                args=grpo_arguments(config, checkpoint_dir, [weight for _, weight in rewards], server),
                train_dataset=dataset,
                processing_class=tokenizer,
                peft_config=peft_config,
                callbacks=[guard, phases, LiveMetrics(metrics_path, metrics_rows, TRAINING_METRICS_SCHEMA), *callbacks],
                **({"rollout_func": rollout} if rollout is not None else {}),
            )
        if config.vllm_quantization != "none":
            sync_by_reload(trainer.vllm_generation)  # before phases.attach wraps the sync in its timer
        trainer.add_callback(CheckpointOnSigterm())  # SIGTERM (preemption): checkpoint, then stop
        if config.fused_lora:
            fuse_lora_projections(trainer.model, config.fused_lora_kernels)  # before compile_layers traces it
        if config.compile_layers:
            compile_decoder_layers(trainer.model)  # LoRA included
        shared_prompt = None
        if config.share_prompt_forward and config.backend == "trl":  # unsloth: its own log-probs
            shared_prompt = SharedPromptForward().attach(trainer)
        if config.share_prompt_forward and config.backend == "trl" and not config.use_vllm:
            SharedPromptGeneration().attach(trainer)  # transformers' generate: each prompt prefilled once
        if config.importance_sampling_from_loss_forward:
            CorrectionFromLossForward().attach(trainer)  # each loss computation (each chunk) fills its own ratio
        if config.backward_chunk_tokens is not None:
            ChunkedBackward(config.backward_chunk_tokens, shared_prompt=shared_prompt).attach(trainer)
        release_stranded_sync_buffers(trainer)  # server mode with vLLM < the fix of its issue 52950
        phases.attach(trainer)
        overlapped = None
        if config.overlap_generation:  # last: its wait for the engine counts as generation
            overlapped = OverlappedGeneration.from_config(config).attach(trainer)
        try:
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        finally:
            if overlapped is not None:
                overlapped.finish()
    if trainer.is_world_process_zero():
        share_like_umask(checkpoint_dir)  # checkpoints too are for colleagues to read (safetensors: 0600)
    state = trainer.state
    kept = None
    if guard.stopped_at is not None:
        kept = best_checkpoint(checkpoint_dir, state.log_history, guard.streak_start)
        if kept is None:
            log.warning("collapse guard fired but no checkpoint precedes the collapse: keeping the final adapter")
    result = TrainResult(
        global_step=state.global_step,
        resumed_from=None if resume is None else str(resume),
        stopped_by_guard=guard.stopped_at is not None,
        kept_checkpoint=None if kept is None else str(kept),
        dataset=dataset_counts,
    )
    if trainer.is_world_process_zero():
        _write_adapter(trainer, output, kept, config, result, guard)
        write_table(metrics_rows(state.log_history), metrics_path, TRAINING_METRICS_SCHEMA)
    return result


def prepare_run(
    config: TrainConfig,
    dataset_path: str | os.PathLike,
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    metrics_path: str | os.PathLike,
    checkpoint_dir: Path,
    init_adapter: str | os.PathLike | None = None,
) -> tuple[Path | None, TrainResult | None]:
    """Prepare the checkpoint folder: ``(checkpoint to resume from, None)``, or ``(checkpoint, result)`` when
    that checkpoint already finished the run and its adapter and metrics were written instead of training."""
    fingerprint = run_fingerprint(config, dataset_path, model_dir)
    if init_adapter is not None:  # only then: checkpoints of runs from a fresh LoRA keep their fingerprint
        fingerprint["init_adapter_sha256"] = model_content_digest(init_adapter)
    resume = prepare_checkpoint_dir(checkpoint_dir, fingerprint, model_dir, fingerprint_defaults(config))
    if resume is not None and reached_the_end(resume, config):
        # A forced rerun of a finished training: resuming would train past max_steps.
        return resume, _finished_from_checkpoint(resume, config, Path(output), metrics_path)
    return resume, None


def _finished_from_checkpoint(
    checkpoint: Path, config: TrainConfig, output: Path, metrics_path: str | os.PathLike
) -> TrainResult:
    """Write the adapter and metrics of a checkpoint that already reached max_steps (no training step)."""
    from arc_pipeline.training.callbacks import CollapseGuard, metrics_rows

    state = json.loads((checkpoint / "trainer_state.json").read_text())
    log.info("%s already reached max_steps=%d: writing its adapter without training", checkpoint, config.max_steps)
    result = TrainResult(
        global_step=int(state.get("global_step", 0)),
        resumed_from=str(checkpoint),
        stopped_by_guard=False,
        kept_checkpoint=str(checkpoint),
    )
    if int(os.environ.get("RANK", "0")) != 0:  # as trainer.is_world_process_zero() in a distributed run
        return result
    _write_adapter(None, output, checkpoint, config, result, CollapseGuard(config.collapse_guard))
    write_table(metrics_rows(state.get("log_history", [])), metrics_path, TRAINING_METRICS_SCHEMA)
    return result


def _write_adapter(
    trainer: Any, output: Path, kept: Path | None, config: TrainConfig, result: TrainResult, guard: Any
) -> None:
    """Write the adapter (the trainer's, or the kept checkpoint's) and the run summary, swapped in atomically."""
    summary = {
        **dataclasses.asdict(result),
        "collapse_reasons": guard.reasons if result.stopped_by_guard else [],
        "config": config.model_dump(mode="json"),
    }
    write_adapter(output, None if trainer is None else lambda folder: trainer.save_model(str(folder)), kept, summary)
    log.info(
        "adapter written to %s (step %d%s)",
        output,
        result.global_step,
        f", kept {result.kept_checkpoint}" if result.kept_checkpoint else "",
    )
