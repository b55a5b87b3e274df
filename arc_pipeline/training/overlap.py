"""Server mode: generate the next step's completions while this step trains (``train.overlap_generation``).

Without it a step is generate-then-train: the vLLM server's GPUs wait while the training GPUs back-propagate,
and the training GPUs wait while the server decodes. Decoding one step's 32 sequences is bound by reading the
weights once per token, so more engines hardly shorten it (docs/multi-gpu.md); running it beside training does.

The order, per optimizer step ``t`` (weights ``w_t`` after ``t`` updates):

1. wait for the request launched during step ``t-1``: step ``t``'s completions, sampled with ``w_{t-1}``;
2. send ``w_t`` to the server (TRL's weight sync; never while a request is in flight);
3. launch step ``t+1``'s request with ``w_t`` on a background thread of rank 0, and return step ``t``'s
   completions; the training processes score and train on them while the server decodes.

So every completion is exactly one update old (on-policy runs have 0). TRL's vLLM importance-sampling
correction (``vllm_importance_sampling_correction``, required with this setting) reweights each token by
``pi_{w_t} / pi_{w_{t-1}}`` as computed from the old-policy forward and vLLM's sampling log-probs, truncated at
TRL's cap. The first step, the first step of each epoch and the first after a resume generate synchronously:
there is no earlier request to take.

The next step's prompts come from the trainer's own data loader: :meth:`OverlappedGeneration.get_batch_samples`
reads one generation batch ahead of the batches the trainer has taken, and hands the trainer exactly the
batches it would have had (same order, same content). Every rank launches and takes a request at the same
points of its step, so the collectives (gathering the prompts, broadcasting the completions) line up; only
rank 0's HTTP request runs on a thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class _Lookahead:
    """An epoch iterator that can show the batches after those it has given out."""

    def __init__(self, iterator: Iterator[Any]) -> None:
        self.iterator = iterator
        self.buffer: deque[Any] = deque()
        self.given = 0

    def __iter__(self) -> _Lookahead:
        return self

    def __next__(self) -> Any:
        batch = self.buffer.popleft() if self.buffer else next(self.iterator)
        self.given += 1
        return batch

    def peek(self, offset: int) -> Any | None:
        """The batch ``offset`` places after the last one given out, or None past the epoch's end."""
        while len(self.buffer) <= offset:
            try:
                self.buffer.append(next(self.iterator))
            except StopIteration:
                return None
        return self.buffer[offset]


@dataclass
class _Request:
    """A generation request in flight: this rank's prompts, and on rank 0 the thread that asks the server."""

    prompts: list[list[int]]
    num_generations: int
    thread: threading.Thread | None = None
    output: dict[str, Any] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class OverlappedGeneration:
    """Attach to a TRL ``GRPOTrainer`` in vLLM server mode with :meth:`attach`, after the other wrappers of its
    engine (arc_pipeline/training/weight_sync.py, arc_pipeline/training/phases.py), so that the wait for a
    request counts as generation, not as weight sync."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.engine: Any = None
        self.lookahead: _Lookahead | None = None
        self.pending: _Request | None = None
        self.prefetched_steps = 0  # steps whose completions came from a request launched a step earlier
        self.synchronous_steps = 0
        self._inner_generate: Any = None
        self._inner_sync: Any = None

    # ------------------------------------------------------------------ wiring

    def attach(self, trainer: Any) -> OverlappedGeneration:
        engine = getattr(trainer, "vllm_generation", None)
        if engine is None or getattr(engine, "mode", None) != "server":
            raise ValueError("overlap_generation needs TRL's vLLM generation in server mode")
        self.trainer = trainer
        self.engine = engine
        self._inner_generate = engine.generate
        self._inner_sync = engine.sync_weights
        engine.generate = self.generate
        engine.sync_weights = self.sync_weights
        inner_batches = trainer.get_batch_samples

        def get_batch_samples(epoch_iterator: Iterator[Any], num_batches: int, device: Any) -> Any:
            if self.lookahead is None or self.lookahead.iterator is not epoch_iterator:
                # a new epoch (or the resumed run's skipping iterator): nothing read ahead of it yet
                self.lookahead = _Lookahead(epoch_iterator)
            return inner_batches(self.lookahead, num_batches, device)

        # Trainer passes the same iterator object every step of an epoch; wrapping it once keeps the read-ahead.
        trainer.get_batch_samples = get_batch_samples
        return self

    # ------------------------------------------------------------------ the engine's two methods

    def sync_weights(self, *args: Any, **kwargs: Any) -> Any:
        self._settle()  # the server must not decode while its weights change
        return self._inner_sync(*args, **kwargs)

    def generate(
        self, prompts: list[list[int]], images: Any, num_generations: int, profiler: Any = None, **kwargs: Any
    ) -> tuple:
        from accelerate.utils import gather_object

        training = self.trainer.model.training
        pending = self.pending
        mine = (
            training
            and images is None
            and not kwargs
            and pending is not None
            and pending.num_generations == num_generations
            and pending.prompts == prompts
        )
        # every rank must take the same branch: the branches run different collectives
        take = all(gather_object([mine]))
        if take:
            self.pending = None
            result = self._collect(pending)
            self.prefetched_steps += 1
        else:
            if pending is not None:
                self._settle()
                self.pending = None
                log.warning("overlap_generation: the prefetched completions did not match this step's prompts")
            result = self._inner_generate(prompts, images, num_generations, profiler, **kwargs)
            self.synchronous_steps += int(training)
        if training and images is None and not kwargs:
            self._launch_next(num_generations)
        return result

    # ------------------------------------------------------------------ requests

    def _next_prompts(self) -> list[list[int]] | None:
        """This rank's tokenized prompts of the next optimizer step, or None (last step, epoch's end)."""
        trainer = self.trainer
        if self.lookahead is None or trainer.state.global_step + 1 >= trainer.state.max_steps:
            return None
        per_generation = trainer.args.steps_per_generation * trainer.num_iterations
        given = self.lookahead.given
        offset = -given % per_generation  # the next batch that starts a generation block
        batch = self.lookahead.peek(offset)
        if batch is None:
            return None
        prompt_ids, _images, _fields = trainer._tokenize_prompts([example["prompt"] for example in batch])
        return prompt_ids

    def _launch_next(self, num_generations: int) -> None:
        from accelerate.utils import gather_object

        prompts = self._next_prompts()
        if not all(gather_object([prompts is not None])):
            return
        all_prompts = gather_object([prompts])
        request = _Request(prompts=prompts, num_generations=num_generations)
        if self.trainer.accelerator.is_main_process:
            unique = [group[i] for group in all_prompts for i in range(0, len(group), num_generations)]
            request.thread = threading.Thread(
                target=self._ask_server, args=(request, unique), name="overlap-generation", daemon=True
            )
            request.thread.start()
        self.pending = request

    def _ask_server(self, request: _Request, unique_prompts: list[list[int]]) -> None:
        engine = self.engine
        try:
            request.output = engine.vllm_client.generate(
                prompts=unique_prompts,
                n=request.num_generations,
                repetition_penalty=engine.repetition_penalty,
                temperature=engine.temperature,
                top_p=engine.top_p,
                top_k=engine.top_k,
                min_p=0.0 if engine.min_p is None else engine.min_p,
                max_tokens=engine.max_completion_length,
                logprobs=engine.logprobs,
                structured_outputs_regex=engine.structured_outputs_regex,
                generation_kwargs=engine.generation_kwargs,
            )
        except BaseException as error:  # raised on the training thread when the result is taken
            request.error = error
        finally:
            request.done.set()

    def _settle(self) -> None:
        """Wait for the request in flight (its result stays for :meth:`generate` to take)."""
        request = self.pending
        if request is not None and request.thread is not None:
            request.done.wait()

    def _collect(self, request: _Request) -> tuple:
        """Rank 0's result of ``request``, broadcast; this rank's slice, as TRL's server-mode generate returns it."""
        from accelerate.utils import broadcast_object_list

        accelerator = self.trainer.accelerator
        payload = None
        if accelerator.is_main_process:
            request.done.wait()
            if request.error is not None:
                raise RuntimeError(f"overlap_generation: the vLLM server request failed: {request.error}") from (
                    request.error
                )
            output = request.output
            payload = (
                output["prompt_ids"],
                output["completion_ids"],
                output["logprobs"],
                output.get("logprob_token_ids"),
            )
        holder = [payload]
        broadcast_object_list(holder, from_process=0)
        all_prompt_ids, all_completion_ids, all_logprobs, all_logprob_token_ids = holder[0]
        n = request.num_generations
        all_prompt_ids = [ids for ids in all_prompt_ids for _ in range(n)]
        mine = slice(
            accelerator.process_index * len(request.prompts), (accelerator.process_index + 1) * len(request.prompts)
        )
        return (
            all_prompt_ids[mine],
            all_completion_ids[mine],
            None if all_logprobs is None else all_logprobs[mine],
            None if all_logprob_token_ids is None else all_logprob_token_ids[mine],
        )
