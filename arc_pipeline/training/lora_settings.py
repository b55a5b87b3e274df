"""The LoRA adapter's shape: one definition for every stage that trains one (``train``: GRPO, ``sft``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraSettings(BaseModel):
    """The LoRA adapter's shape, one definition for every stage that trains one (``train``: GRPO, ``sft``):
    an SFT adapter that GRPO continues must have the shape GRPO would have given it.

    Published run: rank 1, rsLoRA, alpha 64, all attention and MLP projections."""

    model_config = ConfigDict(extra="forbid")

    lora_r: PositiveInt = Field(1, description="LoRA rank (published run: 1, after 'LoRA without regret')")
    lora_alpha: float = Field(64, gt=0, description="LoRA alpha (published run: 64)")
    use_rslora: bool = Field(True, description="rank-stabilised scaling alpha/sqrt(r) (published run: on)")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout (published run: 0)")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: list(ALL_PROJECTIONS), description="modules that get an adapter (published run: all 7)"
    )
