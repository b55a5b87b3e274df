"""Every knob of supervised fine-tuning of the refinement LoRA (the workflow config's ``sft`` section).

The adapter's shape is :class:`~arc_pipeline.training.lora_settings.LoraSettings`, shared with GRPO (``train``), so an
SFT adapter is what GRPO would have trained and GRPO can continue it. The optimisation defaults are ordinary SFT
values for a rank-1 rsLoRA (a rate far above GRPO's 4e-6: SFT's loss is a likelihood, not a clipped ratio of
a few hundred sampled tokens), not a published run's: there was none.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, PositiveInt, model_validator

from arc_pipeline.training.lora_settings import LoraSettings

# Config fields that do not change what is learned: changing them keeps the checkpoints (max_steps too, as
# GRPO's: a longer run resumes the shorter one).
SFT_NOT_IN_FINGERPRINT = frozenset(
    {"enabled", "compare_sft_then_rl", "report_to", "logging_steps", "save_steps", "save_total_limit", "max_steps"}
)


class SftConfig(LoraSettings):
    """SFT of a LoRA adapter on the rejection-sampled refinements (stage ``sft``; docs/scoring.md, "SFT refiner")."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        False,
        description="add the SFT refiner (sft_dataset's sampling and this stage) to the workflow's targets; off, "
        "its rules still run when their outputs are asked for (snakemake <results_dir>/sft/adapter)",
    )
    compare_sft_then_rl: bool = Field(
        False,
        description="also train GRPO from this stage's adapter (<results_dir>/train_sft_rl, train's settings) and "
        "evaluate it as refiner sft_rl beside rl (GRPO from a fresh LoRA) and sft; needs enabled, train.backend trl "
        "and train.init_adapter none (with sft, the rl refiner is already SFT then RL)",
    )
    use_cpu: bool = Field(False, description="train on the CPU (tests, small runs)")
    bf16: bool = Field(True, description="bf16 mixed precision; False on CPU")
    gradient_checkpointing: bool = Field(True, description="recompute activations to fit 8B + long prompts")
    seed: int = Field(42, description="seed of adapter initialisation and data order")

    learning_rate: float = Field(1e-4, gt=0, description="peak learning rate")
    lr_scheduler_type: str = Field("cosine", description="transformers scheduler name")
    warmup_ratio: float = Field(0.03, ge=0, le=1, description="share of the steps spent warming up")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    optim: str = Field("adamw_torch_fused", description="transformers optimizer name")
    num_train_epochs: float = Field(2, gt=0, description="passes over the SFT dataset")
    max_steps: int = Field(-1, description="stop after this many optimizer steps; -1 = run the epochs")
    batch_size: PositiveInt = Field(1, description="sequences per forward pass (per_device_train_batch_size)")
    gradient_accumulation_steps: PositiveInt = Field(8, description="forward passes per optimizer step")
    max_seq_length: PositiveInt = Field(
        9700,
        description="prompt + completion limit in tokens (TRL max_length; longer rows are truncated at the right, "
        "which cuts the completion: the workflow's refinement prompts already fit train.max_seq_length)",
    )
    double_bos: bool = Field(
        False,
        description="keep the rendered prompt's <|begin_of_text|> so that tokenization adds a second one, as "
        "GRPO's train.double_bos does (set both alike for SFT then RL)",
    )

    save_steps: PositiveInt = Field(100, description="checkpoint every this many steps")
    save_total_limit: PositiveInt | None = Field(None, description="keep at most this many checkpoints; None = all")
    logging_steps: PositiveInt = Field(1, description="log every this many steps (one window of metrics)")
    report_to: list[str] = Field(
        default_factory=lambda: ["tensorboard"], description="trackers: tensorboard (default), wandb, none"
    )

    @model_validator(mode="after")
    def _check(self) -> SftConfig:
        if self.use_cpu and self.bf16:
            raise ValueError("bf16 is for GPUs: set bf16 false with use_cpu true")
        return self
