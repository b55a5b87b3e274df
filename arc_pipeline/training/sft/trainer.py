"""SFT of the refinement LoRA with TRL's ``SFTTrainer``, resumable after a kill.

The SFT dataset (``SFT_DATASET_SCHEMA``, stage ``sft_dataset``) is TRL's prompt-completion format: the
``prompt`` is the refinement prompt as rendered with the chat template (the text GRPO trains on, with the
same BOS rule: :func:`~arc_pipeline.training.base_model.strip_rendered_bos`), the ``completion`` the model's
own answer that solved the task. The rows are tokenized as the model saw them when sampling
(:func:`load_sft_dataset`), and with ``completion_only_loss`` TRL computes the loss on the completion and its
end token only. The LoRA, the model loading, the
checkpoints (fingerprint, resume from the last complete one), SIGTERM handling, the metrics parquet and the
adapter folder are the GRPO stage's (:mod:`arc_pipeline.training.grpo`).

Heavy imports (torch, transformers, TRL) happen inside functions.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arc_pipeline.io import InputFileError, read_frame, share_like_umask, write_table
from arc_pipeline.schemas import SFT_DATASET_SCHEMA, TRAINING_METRICS_SCHEMA
from arc_pipeline.training.base_model import load_causal_lm, strip_rendered_bos
from arc_pipeline.training.checkpoints import (
    default_checkpoint_dir,
    fingerprint_defaults,
    prepare_checkpoint_dir,
    reached_the_end,
    run_fingerprint,
    write_adapter,
)
from arc_pipeline.training.sft.config import SFT_NOT_IN_FINGERPRINT, SftConfig
from arc_pipeline.training.trainer_args import lora_config, warmup

log = logging.getLogger(__name__)


@dataclass
class SftResult:
    global_step: int
    resumed_from: str | None
    rows: int


def load_sft_dataset(path: str | os.PathLike, tokenizer: Any, config: SftConfig) -> Any:
    """The SFT parquet as a tokenized ``datasets.Dataset``: ``input_ids`` and ``completion_mask``.

    Tokenized here, not by TRL: TRL tokenizes ``prompt + completion`` as one text and, where tokens merge
    across the boundary (the prompt ends with the assistant header's blank line), cuts the prompt short.
    The model saw something else when it sampled the completion: the prompt's own tokens (vLLM, as GRPO's
    ``tokenizer(prompt)``, BOS by the same rule) followed by generated tokens. So the row is the prompt's
    tokens, the completion's tokens and the end token the sampler stopped on (the tokenizer's eos, as TRL
    appends), and only the completion and its end token are learned (``completion_mask``).
    """
    from datasets import Dataset

    frame = read_frame(path, SFT_DATASET_SCHEMA)
    if frame.height == 0:
        raise InputFileError(f"{path}: no completion to train on (no sampled refinement solved its task)")
    frame = strip_rendered_bos(frame, tokenizer, config.double_bos)
    prompts = tokenizer(frame["prompt"].to_list())["input_ids"]
    completions = tokenizer(frame["completion"].to_list(), add_special_tokens=False)["input_ids"]
    end = [tokenizer.eos_token_id]
    return Dataset.from_dict(
        {
            "input_ids": [p + c + end for p, c in zip(prompts, completions, strict=True)],
            "completion_mask": [[0] * len(p) + [1] * (len(c) + 1) for p, c in zip(prompts, completions, strict=True)],
        }
    )


def sft_arguments(config: SftConfig, output_dir: str | os.PathLike) -> Any:
    """TRL's ``SFTConfig`` with every value that matters set from ``config``."""
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(output_dir),
        seed=config.seed,
        data_seed=config.seed,
        use_cpu=config.use_cpu,
        bf16=config.bf16,
        fp16=False,
        gradient_checkpointing=config.gradient_checkpointing,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler_type,
        **warmup(SFTConfig, config.warmup_ratio),
        max_grad_norm=config.max_grad_norm,
        weight_decay=config.weight_decay,
        optim=config.optim,
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        # prompt-completion rows: the loss covers the completion only, never the prompt it was conditioned on
        completion_only_loss=True,
        max_length=config.max_seq_length,
        packing=False,  # packing would let a completion attend to another row's prompt
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        save_only_model=False,  # optimizer and RNG states are needed to resume
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        report_to=list(config.report_to) or "none",
        run_name=Path(output_dir).name,
    )


def build_trainer(config: SftConfig, dataset_path: Path, model_dir: Path, checkpoint_dir: Path, callbacks=()) -> Any:
    """TRL's ``SFTTrainer`` as the stage runs it (not trained yet): tests read its tokenized dataset."""
    from trl import SFTTrainer

    from arc_pipeline.models.folder import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    return SFTTrainer(
        model=load_causal_lm(model_dir, config.bf16),
        args=sft_arguments(config, checkpoint_dir),
        train_dataset=load_sft_dataset(dataset_path, tokenizer, config),
        processing_class=tokenizer,
        peft_config=lora_config(config),
        callbacks=list(callbacks),
    )


def train_sft(
    config: SftConfig,
    dataset_path: str | os.PathLike,
    model_dir: str | os.PathLike,
    output: str | os.PathLike,
    metrics_path: str | os.PathLike,
    checkpoint_dir: str | os.PathLike | None = None,
) -> SftResult:
    """Train (or resume, or finish from a checkpoint that already reached the end), then write the adapter
    folder ``output`` and the metrics parquet."""
    from arc_pipeline.training.callbacks import LiveMetrics, metrics_rows
    from arc_pipeline.training.processes.preemption import CheckpointOnSigterm

    output, dataset_path, model_dir = Path(output), Path(dataset_path), Path(model_dir)
    checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else default_checkpoint_dir(output)
    fingerprint = run_fingerprint(config, dataset_path, model_dir, SFT_NOT_IN_FINGERPRINT)
    resume = prepare_checkpoint_dir(
        checkpoint_dir,
        fingerprint,
        model_dir,
        fingerprint_defaults(config, SFT_NOT_IN_FINGERPRINT),
        SFT_NOT_IN_FINGERPRINT,
    )
    rows = read_frame(dataset_path, SFT_DATASET_SCHEMA).height
    if resume is not None and reached_the_end(resume, config):
        # a forced rerun of a finished run: resuming would train past max_steps
        state = json.loads((resume / "trainer_state.json").read_text())
        result = SftResult(int(state.get("global_step", 0)), str(resume), rows)
        _write_outputs(None, resume, output, metrics_path, state.get("log_history", []), config, result)
        return result
    live = LiveMetrics(metrics_path, metrics_rows, TRAINING_METRICS_SCHEMA)
    trainer = build_trainer(config, dataset_path, model_dir, checkpoint_dir, callbacks=[live])
    trainer.add_callback(CheckpointOnSigterm())  # SIGTERM (preemption): checkpoint, then stop
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    share_like_umask(checkpoint_dir)  # checkpoints too are for colleagues to read (safetensors: 0600)
    result = SftResult(trainer.state.global_step, None if resume is None else str(resume), rows)
    _write_outputs(trainer, None, output, metrics_path, trainer.state.log_history, config, result)
    return result


def _write_outputs(trainer, kept, output: Path, metrics_path, log_history, config: SftConfig, result) -> None:
    from arc_pipeline.training.callbacks import metrics_rows

    summary = {**asdict(result), "stage": "sft", "config": config.model_dump(mode="json")}
    save = None if trainer is None else lambda folder: trainer.save_model(str(folder))
    write_adapter(output, save, kept, summary)
    write_table(metrics_rows(log_history), metrics_path, TRAINING_METRICS_SCHEMA)
    log.info("SFT adapter written to %s (step %d, %d rows)", output, result.global_step, result.rows)
