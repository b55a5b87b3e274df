"""Checkpoint on preemption: SIGTERM (what HTCondor and Slurm send before they kill a job) makes training
save a checkpoint at the end of the current step and stop with an error that says the job is resumable.

Without this, SIGTERM ended the process at once and the rerun resumed from the last ``save_steps``
checkpoint, losing up to ``save_steps`` steps. The step under way is finished, not cut short: the batch
system's grace period (HTCondor ``job_max_vacate_time``, Slurm ``KillWait`` or ``--signal``) must cover
one step and one save (docs/reliability.md). A second SIGTERM changes nothing; SIGKILL still ends the
process at once, and the rerun then resumes from the last complete checkpoint. In a multi-process run
(arc_pipeline/training/launch.py) the ranks agree at every step's end whether any of them got SIGTERM, so they
all save the same checkpoint and stop together.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from transformers import TrainerCallback

from arc_pipeline.errors import PipelineError

log = logging.getLogger(__name__)


class TrainingPreempted(PipelineError):
    """Training stopped on SIGTERM after saving a checkpoint; rerunning the job resumes from it."""


def _any_rank_requested(requested: bool, device: Any) -> bool:
    """Whether any rank of a multi-process run got SIGTERM (a collective every step: the ranks must save and
    stop at the same step, or the one that goes on waits forever in the next step's collectives)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return requested
    import torch

    flag = torch.tensor([int(requested)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


class CheckpointOnSigterm(TrainerCallback):
    """On SIGTERM: ask the trainer to save at the end of this step and stop, then raise
    :class:`TrainingPreempted` once the checkpoint is on disk (the stage exits with status 1, and the
    adapter, written only at the end of training, is not written)."""

    def __init__(self) -> None:
        self.requested_at: int | None = None  # global step at which SIGTERM arrived
        self._state: Any = None
        self._previous: Any = None
        self._installed = False

    def _on_sigterm(self, signum: int, _frame: object) -> None:
        # only a flag here: the trainer reads it between steps
        if self.requested_at is None:
            self.requested_at = self._state.global_step if self._state is not None else 0
            log.warning("SIGTERM: saving a checkpoint at the end of the current step, then stopping")

    def on_train_begin(self, args, state, control, **kwargs):
        self._state = state
        if threading.current_thread() is threading.main_thread():  # signal handlers live on the main thread
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested_at is None and _any_rank_requested(False, args.device):
            self.requested_at = state.global_step  # another rank got SIGTERM first: stop at the same step
        elif self.requested_at is not None:
            _any_rank_requested(True, args.device)
        if self.requested_at is not None:
            if state.max_steps and state.global_step >= state.max_steps:
                # the last step: finishing (the adapter) costs no more than a checkpoint, and needs no rerun
                log.warning("SIGTERM during the last step: finishing instead of checkpointing")
                self.requested_at = None
                return control
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.requested_at is not None:  # the checkpoint of this step is complete (trainer_state.json last)
            self._restore()
            raise TrainingPreempted(
                f"stopped by SIGTERM; saved checkpoint-{state.global_step} in {args.output_dir}. "
                "Run the job again (snakemake reruns it) to resume from there."
            )
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._restore()
        return control

    def _restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
