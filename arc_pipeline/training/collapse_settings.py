"""The collapse guard's settings (the ``train.collapse_guard`` section); the guard itself is a trainer callback in
arc_pipeline/training/callbacks.py."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PositiveInt


class CollapseGuardConfig(BaseModel):
    """Stop training when it collapses into long, repetitive or gibberish outputs (docs/defaults.md).
    A set threshold crossed in ``patience`` consecutive logging windows stops training; the stage keeps the best
    checkpoint saved before the streak began (highest mean reward since the previous one). Off by default."""

    model_config = ConfigDict(extra="forbid")

    max_truncated_share: float | None = Field(
        None, ge=0, le=1, description="collapse when TRL's completions/clipped_ratio exceeds this (e.g. 0.3)"
    )
    min_entropy: float | None = Field(
        None, ge=0, description="collapse when the mean token entropy (nats) falls below this (mode collapse)"
    )
    max_entropy: float | None = Field(
        None, ge=0, description="collapse when the mean token entropy (nats) rises above this (gibberish)"
    )
    patience: PositiveInt = Field(3, description="consecutive offending logging windows before stopping")

    @property
    def enabled(self) -> bool:
        return any(v is not None for v in (self.max_truncated_share, self.min_entropy, self.max_entropy))
