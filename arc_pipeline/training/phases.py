"""Where a GRPO step's time goes: seconds per optimizer step in each phase, logged as training metrics.

``PhaseTimer`` wraps a few methods of the TRL trainer it is attached to and adds, per optimizer step,
``time/<phase>`` metrics to the trainer's own metric buffer, so they reach ``metrics.parquet``, TensorBoard
and ``benchmarks/gpu_grpo.py`` averaged over each logging window like TRL's own metrics:

=================  =====================================================================================
``generation``     sampling the completions (vLLM or transformers), without the weight sync
``weight_sync``    loading the updated policy into the colocated vLLM engine
``rewards``        executing the completions in the sandbox and scoring them
``logprobs``       forward passes without gradient: the reference model's (KL) and old-policy log-probs
``prepare_other``  the rest of preparing a generation batch (tokenizing, advantages, gathering)
``train``          forward and backward of the loss over the accumulation steps
``optimizer``      the optimizer step (after gradient clipping)
``step``           the whole optimizer step
=================  =====================================================================================

Plus ``memory/peak_allocated_gib`` (the PyTorch allocator's peak during the step, vLLM's colocated
allocations included), ``memory/reserved_gib`` (what the allocator holds at the step's end, cached blocks
included), ``memory/device_used_gib`` (what the whole device has in use at the step's end) and
``memory/host_peak_gib`` (the process's peak resident memory). On a GPU the clock is read after
synchronizing the training thread's CUDA stream, so queued kernels are counted in the phase that launched them.
"""

from __future__ import annotations

import functools
import resource
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback

PHASE_METRIC_PREFIX = "time/"
MEMORY_METRIC_PREFIX = "memory/"


class PhaseTimer(TrainerCallback):
    """Attach with :meth:`attach` after the trainer exists; it is also the trainer's callback."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.trainer: Any = None
        self._cuda = False
        self._step_started = 0.0
        self._optimizer_started = 0.0

    # ------------------------------------------------------------------ clock

    def _now(self) -> float:
        if self._cuda:
            import torch

            # this thread's stream, not the device: a colocated engine decoding on its own stream beside training
            # (train.overlap_generation) is not this phase's work
            torch.cuda.current_stream().synchronize()
        return time.perf_counter()

    def _timed(self, phase: str | Callable[[], str], method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = self._now()
            try:
                return method(*args, **kwargs)
            finally:
                name = phase() if callable(phase) else phase
                self.seconds[name] += self._now() - started

        return wrapper

    # ------------------------------------------------------------------ wiring

    def attach(self, trainer: Any) -> PhaseTimer:
        """Wrap the trainer's phase methods (instance attributes: the class stays untouched)."""
        import torch

        self.trainer = trainer
        self._cuda = torch.cuda.is_available() and not trainer.args.use_cpu

        def logprob_phase() -> str:
            return "train_forward" if torch.is_grad_enabled() else "logprobs"

        wraps = {
            "_prepare_inputs": "prepare",
            "_generate_single_turn": "generation_gross",
            "_calculate_rewards": "rewards",
            "_get_per_token_logps_and_entropies": logprob_phase,
            "training_step": "training_step",
        }
        for name, phase in wraps.items():
            if hasattr(trainer, name):
                setattr(trainer, name, self._timed(phase, getattr(trainer, name)))
        engine = getattr(trainer, "vllm_generation", None)
        if engine is not None and hasattr(engine, "sync_weights"):
            engine.sync_weights = self._timed("weight_sync", engine.sync_weights)
        return self

    # ------------------------------------------------------------------ callback

    def on_step_begin(self, args, state, control, **kwargs):
        self.seconds.clear()
        if self._cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        self._step_started = self._now()
        return control

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._optimizer_started = self._now()
        return control

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.seconds["optimizer"] += self._now() - self._optimizer_started
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer is None:
            return control
        step = self._now() - self._step_started
        metrics = step_phases(self.seconds, step)
        metrics.update(self._memory())
        buffer = self.trainer._metrics["train"]  # TRL averages these lists per logging window
        for name, value in metrics.items():
            buffer[name].append(value)
        return control

    def _memory(self) -> dict[str, float]:
        gib = 2**30
        host_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / gib  # ru_maxrss is in KiB
        memory = {f"{MEMORY_METRIC_PREFIX}host_peak_gib": host_peak}
        if self._cuda:
            import torch

            free, total = torch.cuda.mem_get_info()
            memory[f"{MEMORY_METRIC_PREFIX}peak_allocated_gib"] = torch.cuda.max_memory_allocated() / gib
            memory[f"{MEMORY_METRIC_PREFIX}reserved_gib"] = torch.cuda.memory_reserved() / gib
            memory[f"{MEMORY_METRIC_PREFIX}device_used_gib"] = (total - free) / gib
        return memory


def step_phases(seconds: dict[str, float], step: float) -> dict[str, float]:
    """Disjoint phases of one step from the nested timings (``time/<phase>``, seconds).

    The wrapped calls nest: ``training_step`` holds ``prepare`` (the generation batch, once per
    ``steps_per_generation``), which holds generation (itself holding the weight sync), rewards and the
    no-gradient log-probs.
    """
    get = seconds.get
    generation = get("generation_gross", 0.0) - get("weight_sync", 0.0)
    prepare_other = get("prepare", 0.0) - get("generation_gross", 0.0) - get("rewards", 0.0) - get("logprobs", 0.0)
    phases = {
        "generation": generation,
        "weight_sync": get("weight_sync", 0.0),
        "rewards": get("rewards", 0.0),
        "logprobs": get("logprobs", 0.0),
        "prepare_other": prepare_other,
        "train": get("training_step", 0.0) - get("prepare", 0.0),
        "optimizer": get("optimizer", 0.0),
        "step": step,
    }
    return {PHASE_METRIC_PREFIX + name: max(0.0, value) for name, value in phases.items()}
