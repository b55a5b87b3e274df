"""Trainer callbacks: the collapse guard and the training metrics written at every logging step (so
curves can be watched while training runs). The checkpoint kept after the guard fires is chosen in
arc_pipeline/training/checkpoints.py.

The guard reads only what the trainer logs (``state.log_history``), so after a resume it replays the
history and continues with the same streak it had when the job was killed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from arc_pipeline.training.collapse_settings import CollapseGuardConfig

log = logging.getLogger(__name__)

TRUNCATED_SHARE_KEY = "completions/clipped_ratio"  # TRL's share of completions without a stop token
ENTROPY_KEY = "entropy"


def collapse_reasons(logs: dict[str, Any], config: CollapseGuardConfig) -> list[str]:
    """Which thresholds one logging window crosses (empty when healthy or not a training log)."""
    reasons = []
    truncated = logs.get(TRUNCATED_SHARE_KEY)
    entropy = logs.get(ENTROPY_KEY)
    if config.max_truncated_share is not None and truncated is not None and truncated > config.max_truncated_share:
        reasons.append(f"truncated share {truncated:.3f} > {config.max_truncated_share}")
    if entropy is not None and config.min_entropy is not None and entropy < config.min_entropy:
        reasons.append(f"entropy {entropy:.3f} < {config.min_entropy}")
    if entropy is not None and config.max_entropy is not None and entropy > config.max_entropy:
        reasons.append(f"entropy {entropy:.3f} > {config.max_entropy}")
    return reasons


class CollapseGuard(TrainerCallback):
    """Stop training after ``patience`` consecutive logging windows that cross a collapse threshold.

    ``stopped_at`` (step), ``streak_start`` (step of the first offending window) and ``reasons`` say
    what happened; the stage then keeps ``checkpoints.best_checkpoint`` from before ``streak_start``.
    """

    def __init__(self, config: CollapseGuardConfig) -> None:
        self.config = config
        self.streak = 0
        self.streak_start: int | None = None
        self.stopped_at: int | None = None
        self.reasons: list[str] = []

    def _observe(self, step: int, logs: dict[str, Any]) -> bool:
        if TRUNCATED_SHARE_KEY not in logs and ENTROPY_KEY not in logs:
            return False  # not a training-metrics log (e.g. the final summary)
        reasons = collapse_reasons(logs, self.config)
        if not reasons:
            self.streak, self.streak_start = 0, None
            return False
        if self.streak == 0:
            self.streak_start = step
        self.streak += 1
        self.reasons = reasons
        return self.streak >= self.config.patience

    def on_train_begin(self, args, state, control, **kwargs):
        # After a resume the history holds the windows logged before the kill: replay them.
        self.streak, self.streak_start = 0, None
        for entry in state.log_history:
            self._observe(int(entry.get("step", 0)), entry)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and self.config.enabled and self._observe(state.global_step, logs):
            self.stopped_at = state.global_step
            control.should_training_stop = True
            log.warning(
                "collapse guard: %d consecutive windows from step %d (%s); stopping at step %d",
                self.streak,
                self.streak_start,
                "; ".join(self.reasons),
                state.global_step,
            )
        return control


class LiveMetrics(TrainerCallback):
    """Rewrite the metrics parquet (atomically) after every logging window, on the main process only.

    ``rows`` turns the trainer's log history into the parquet's rows; the final write at the end of
    training goes through the same function, so the file only ever grows by whole windows.
    """

    def __init__(self, path: str | Path, rows: Any, schema: Any) -> None:
        self.path, self.rows, self.schema = Path(path), rows, schema

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero:
            from arc_pipeline.io import write_table

            write_table(self.rows(state.log_history), self.path, self.schema)
        return control


def metrics_rows(log_history: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trainer's log history in long format (``TRAINING_METRICS_SCHEMA``); NaN becomes null.

    Names are sorted within a step: the trainer saves the history of a checkpoint with sorted keys, so
    without it a resumed run would write the same rows in another order."""
    rows = []
    for entry in log_history:
        step = int(entry.get("step", 0))
        epoch = entry.get("epoch")
        for name, value in sorted(entry.items()):
            if name in ("step", "epoch") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            number = float(value)
            rows.append({"step": step, "epoch": epoch, "name": name, "value": None if math.isnan(number) else number})
    return rows
