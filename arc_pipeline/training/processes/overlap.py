"""Server mode: generate later steps' completions while this step trains (``train.overlap_generation``).

Without it a step is generate-then-train: the vLLM server's GPUs wait while the training GPUs back-propagate,
and the training GPUs wait while the server decodes. Decoding one step's 32 sequences is bound by reading the
weights once per token, so more engines hardly shorten it (docs/multi-gpu.md); running it beside training does.

One server request holds ``k`` steps' completions (``train.overlap_request_steps``, default 1). The order, per
optimizer step ``t`` (weights ``w_t`` after ``t`` updates):

1. take step ``t``'s completions: kept from the last request, or that request's answer (waiting for it);
2. when no request is in flight any more: send ``w_t`` to the server (TRL's weight sync, deferred from where
   TRL asks for it, so that the server never changes weights while it decodes), then send the request for the
   ``k`` steps after those already kept, on a background thread of rank 0; the training processes score and
   train on step ``t``'s completions while the server decodes.

With ``k = 1`` every completion is exactly one update old (on-policy runs have 0). With ``k = 2`` a request is
sent every second step, for the two steps after the next, so completions are two or three updates old: a server
that needs up to two steps' time to decode one request's (twice as many) sequences still keeps up, and a batch
of twice the sequences costs the server far less than twice the time (docs/multi-gpu.md). TRL's vLLM
importance-sampling correction (``vllm_importance_sampling_correction``, required with this setting) reweights
each token by ``pi_{w_t} / pi_{w_s}`` from the current policy's log-probs and vLLM's sampling log-probs,
truncated at TRL's cap. The first step, the first step of each epoch and the first after a resume generate
synchronously: there is no earlier request to take.

``train.overlap_decode_ahead: false`` keeps the ``k``-step requests and drops the decode beside training: a step
that finds no completions kept sends the weights and one request for its own prompts and the next ``k - 1`` steps',
waits for it, and keeps the rest; nothing decodes while the policy trains. Completions are 0 to ``k - 1`` updates
old, the weights go to the engine once per request, and each decoding step's weight reads serve ``k`` steps'
sequences. It is for a GPU where the decode beside training costs about what it costs alone (benchmarks/README.md).

The later steps' prompts come from the trainer's own data loader: :meth:`OverlappedGeneration.get_batch_samples`
reads generation batches ahead of those the trainer has taken, and hands the trainer exactly the batches it
would have had (same order, same content). Every rank launches and takes a request at the same points of its
step, so the collectives (gathering the prompts, broadcasting the completions) line up; only rank 0's HTTP
request runs on a thread.

**Colocate mode (one GPU):** the engine lives in the training process, so the request is the engine's own
``generate`` on a background thread of every rank, each rank asking for its own prompts: the decode (bound by
memory reads) runs beside the training passes (bound by arithmetic) on the same GPU, on two CUDA streams. The
engine keeps the stream it was built on (vLLM makes a stream of its own the building thread's current one), and
everything it does (the weight sync, the synchronous generations, the requests) runs there; training moves to a
stream of its own at :meth:`OverlappedGeneration.attach`. Both halves matter: PyTorch's caching allocator hands a
freed block to later allocations *of the stream that allocated it*, so an engine tensor allocated on one stream and
freed after work on another can be handed out while that work still reads it. With the engine on a second stream
while its build-time and first-step tensors sat on the training stream, an 8B run on an H200 hit an illegal memory
access at the second step, twice (benchmarks/README.md). The engine's stream waits for the training stream before
the engine starts (the sync reads the trained weights), and the training stream for the engine's when its
completions are taken. A device-wide ``torch.cuda.synchronize`` on the training thread would wait for the decode too
(arc_pipeline/training/phases.py synchronizes the training stream only). Both streams share the GPU's SMs as its
scheduler hands them out; ``train.overlap_training_first`` gives training's stream the higher priority, so the
decode, which has the rest of the step to finish, takes what training leaves idle.

The two threads share the interpreter lock too: a thread that let it go around a kernel launch may wait the
interpreter's switch interval (5 ms) to get it back, its stream idle; ``train.overlap_switch_interval_ms`` sets it.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arc_pipeline.training.processes.overlap_batches import Lookahead, request_prompts
from arc_pipeline.training.processes.overlap_requests import (
    KeptStep,
    Request,
    ask_server,
    generate_here,
    local_steps,
    server_steps,
)

log = logging.getLogger(__name__)


class OverlappedGeneration:
    """Attach to a TRL ``GRPOTrainer`` in vLLM server or colocate mode with :meth:`attach`, after the other wrappers
    of its engine (arc_pipeline/training/processes/weight_sync.py, arc_pipeline/training/phases.py), so that the wait
    for a request counts as generation, not as weight sync."""

    def __init__(
        self,
        request_steps: int = 1,
        training_first: bool = False,
        switch_interval_ms: float | None = None,
        decode_ahead: bool = True,
    ) -> None:
        if request_steps < 1:
            raise ValueError(f"overlap_request_steps must be at least 1, not {request_steps}")
        self.request_steps = request_steps
        self.decode_ahead = decode_ahead  # False: a request is sent when its first step needs it, and waited for
        self.training_first = training_first  # colocate on a GPU: training's stream scheduled before the engine's
        self.switch_interval_ms = switch_interval_ms  # the interpreter's, while training runs; None: left as it is
        self._switch_interval_before: float | None = None
        self.trainer: Any = None
        self.engine: Any = None
        self.lookahead: Lookahead | None = None
        self.pending: Request | None = None
        self.kept: deque[KeptStep] = deque()  # this rank's prompts and their completions, step by step
        self.owed_sync: tuple[tuple, dict] | None = None  # TRL's weight sync, deferred until the server is idle
        self.prefetched_steps = 0  # steps whose completions came from a request launched in an earlier step
        self.synchronous_steps = 0
        self.requests_sent = 0
        self._inner_generate: Any = None
        self._inner_sync: Any = None
        self.colocated = False
        self.stream: Any = None  # colocate on a GPU: the engine's CUDA stream (training has another)

    @classmethod
    def from_config(cls, config: Any) -> OverlappedGeneration:
        """From the train config's overlap_* settings."""
        return cls(
            config.overlap_request_steps,
            config.overlap_training_first,
            config.overlap_switch_interval_ms,
            config.overlap_decode_ahead,
        )

    # ------------------------------------------------------------------ wiring

    def attach(self, trainer: Any) -> OverlappedGeneration:
        engine = getattr(trainer, "vllm_generation", None)
        mode = getattr(engine, "mode", None)
        if mode not in ("server", "colocate"):
            raise ValueError("overlap_generation needs TRL's vLLM generation (server or colocate mode)")
        if mode == "colocate" and (
            getattr(engine, "enable_sleep_mode", False) or getattr(engine, "tensor_parallel_size", 1) != 1
        ):
            # a sleeping engine drops its weights between steps; tensor parallelism gathers prompts collectively
            raise ValueError("overlap_generation in colocate mode needs an engine without sleep mode on one GPU")
        self.trainer = trainer
        self.engine = engine
        self.colocated = mode == "colocate"
        if self.colocated:
            import torch

            if torch.cuda.is_available() and not trainer.args.use_cpu:
                # the stream the engine was built on (and allocated on) stays the engine's; training moves
                self.stream = torch.cuda.current_stream()
                # a lower number is a higher priority; the engine's stream (vLLM's) has the default, 0
                training = torch.cuda.Stream(device=self.stream.device, priority=-1 if self.training_first else 0)
                training.wait_stream(self.stream)
                torch.cuda.set_stream(training)
        self._inner_generate = engine.generate
        self._inner_sync = engine.sync_weights
        engine.generate = self.generate
        engine.sync_weights = self.sync_weights
        inner_batches = trainer.get_batch_samples

        def get_batch_samples(epoch_iterator: Iterator[Any], num_batches: int, device: Any) -> Any:
            if self.lookahead is None or self.lookahead.iterator is not epoch_iterator:
                # a new epoch (or the resumed run's skipping iterator): nothing read ahead of it yet
                self.lookahead = Lookahead(epoch_iterator)
            return inner_batches(self.lookahead, num_batches, device)

        # Trainer passes the same iterator object every step of an epoch; wrapping it once keeps the read-ahead.
        trainer.get_batch_samples = get_batch_samples
        if self.switch_interval_ms is not None:
            self._switch_interval_before = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_interval_ms / 1000)
        return self

    def finish(self) -> None:
        """After training: log what was overlapped, and give the interpreter its switch interval back."""
        log.info(
            "overlap_generation: %d steps trained on completions decoded during an earlier step, %d generated "
            "synchronously, %d requests",
            self.prefetched_steps,
            self.synchronous_steps,
            self.requests_sent,
        )
        if self._switch_interval_before is not None:
            sys.setswitchinterval(self._switch_interval_before)
            self._switch_interval_before = None

    # ------------------------------------------------------------------ the engine's two methods

    def sync_weights(self, *args: Any, **kwargs: Any) -> None:
        """Deferred: the weights go to the server right before the next request or synchronous generation, when
        nothing is in flight (the server must not decode while its weights change)."""
        self.owed_sync = (args, kwargs)

    def generate(
        self, prompts: list[list[int]], images: Any, num_generations: int, profiler: Any = None, **kwargs: Any
    ) -> tuple:
        from accelerate.utils import gather_object

        training = self.trainer.model.training
        ours = training and images is None and not kwargs
        mine = ours and self._holds(prompts, num_generations)
        # every rank must take the same branch: the branches run different collectives
        take = all(gather_object([mine]))
        if take:
            if not self.kept:
                self._keep(self.pending)
                self.pending = None
            _, result = self.kept.popleft()
            self.prefetched_steps += 1
        else:
            if self.pending is not None or self.kept:
                self._settle()
                log.warning("overlap_generation: the prefetched completions did not match this step's prompts")
            self.pending = None
            self.kept.clear()
            self._pay_owed_sync()
            if ours and not self.decode_ahead:
                result = self._generate_with_next_steps(prompts, num_generations)
            else:
                with self._on_engine_stream():
                    result = self._inner_generate(prompts, images, num_generations, profiler, **kwargs)
            self.synchronous_steps += int(training)
        if ours and self.pending is None and self.decode_ahead:
            self._launch_next(num_generations)
        return result

    def _generate_with_next_steps(self, prompts: list[list[int]], num_generations: int) -> tuple:
        """This step's completions, from one request that holds the next ``request_steps - 1`` steps' too (kept for
        them), waited for here."""
        self._launch_next(num_generations, first=prompts)
        self._keep(self.pending)
        self.pending = None
        _, result = self.kept.popleft()
        return result

    # ------------------------------------------------------------------ requests

    def _holds(self, prompts: list[list[int]], num_generations: int) -> bool:
        """Whether the next completions kept or in flight are for ``prompts``."""
        if self.kept:
            return self.kept[0][0] == prompts  # its completions are one row per prompt row, as kept
        request = self.pending
        return request is not None and request.num_generations == num_generations and request.blocks[0] == prompts

    def _pay_owed_sync(self) -> None:
        if self.owed_sync is not None:
            args, kwargs = self.owed_sync
            self.owed_sync = None
            with self._on_engine_stream():
                self._inner_sync(*args, **kwargs)

    @contextmanager
    def _on_engine_stream(self) -> Iterator[None]:
        """Engine work called from the training thread, with nothing in flight: on the engine's stream, after the
        training stream's work so far (the trained weights), and the training stream waits for it."""
        if self.stream is None:
            yield
            return
        import torch

        training = torch.cuda.current_stream()
        self.stream.wait_stream(training)
        with torch.cuda.stream(self.stream):
            yield
        training.wait_stream(self.stream)

    def _steps_per_block(self) -> int:
        args = self.trainer.args
        return max(1, args.steps_per_generation * self.trainer.num_iterations // args.gradient_accumulation_steps)

    def _prompts_ahead(self, blocks_ahead: int) -> list[list[int]] | None:
        """This rank's tokenized prompts of the generation batch ``blocks_ahead`` after the next one (0: the next),
        or None (past the last step or the epoch's end)."""
        trainer = self.trainer
        if self.lookahead is None:
            return None
        if trainer.state.global_step + (blocks_ahead + 1) * self._steps_per_block() >= trainer.state.max_steps:
            return None
        per_generation = trainer.args.steps_per_generation * trainer.num_iterations
        offset = -self.lookahead.given % per_generation + blocks_ahead * per_generation
        batch = self.lookahead.peek(offset)
        if batch is None:
            return None
        prompt_ids, _images, _fields = trainer._tokenize_prompts([example["prompt"] for example in batch])
        return prompt_ids

    def _launch_next(self, num_generations: int, first: list[list[int]] | None = None) -> None:
        """Send the request for the ``request_steps`` steps after those kept, or with ``first`` (this step's
        prompts) for this step and the ``request_steps - 1`` after it."""
        from accelerate.utils import gather_object

        blocks: list[list[list[int]]] = [] if first is None else [first]
        for index in range(self.request_steps - len(blocks)):
            prompts = self._prompts_ahead(len(self.kept) + index)
            if prompts is None:
                break
            blocks.append(prompts)
        count = min(gather_object([len(blocks)]))
        if count == 0:
            return
        blocks = blocks[:count]
        every_rank = gather_object([blocks])  # [rank][block] -> prompts
        rows = [[len(rank_blocks[block]) for rank_blocks in every_rank] for block in range(count)]
        self._pay_owed_sync()  # the server decodes this request with the weights trained so far
        request = Request(blocks=blocks, rows=rows, num_generations=num_generations)
        if self.colocated:  # every rank's own engine, its own prompts, on the engine's stream after the sync
            target, args = generate_here, (self._inner_generate, self.stream, request)
        elif self.trainer.accelerator.is_main_process:
            target, args = ask_server, (self.engine, request, request_prompts(every_rank, num_generations))
        else:
            target = None
        if target is not None and first is not None:  # waited for at once: on this thread, nothing beside it
            with self._on_engine_stream():
                target(*args)
        elif target is not None:
            request.thread = threading.Thread(target=target, args=args, name="overlap-generation", daemon=True)
            request.thread.start()
        self.requests_sent += 1
        self.pending = request

    def _settle(self) -> None:
        """Wait for the request in flight (its result stays for :meth:`generate` to take)."""
        request = self.pending
        if request is not None and request.thread is not None:
            self._wait(request)

    def _wait(self, request: Request) -> None:
        """Until ``request`` has answered; in colocate mode on a GPU the training stream then waits for the engine's
        stream too, so nothing training queues from here on runs before the request's kernels are done."""
        request.done.wait()
        if self.stream is not None:
            import torch

            torch.cuda.current_stream().wait_stream(self.stream)

    def _answer(self, request: Request) -> Any:
        """``request``'s output once it has answered, its error raised here, on the training thread."""
        self._wait(request)
        if request.error is not None:
            where = "the colocated engine's" if self.colocated else "the vLLM server"
            raise RuntimeError(f"overlap_generation: {where} request failed: {request.error}") from request.error
        return request.output

    def _keep(self, request: Request | None) -> None:
        """Rank 0's answer to ``request``, broadcast; this rank's rows of each of its steps, kept in order, each as
        TRL's server-mode generate returns it."""
        assert request is not None
        if self.colocated:
            self.kept.extend(local_steps(self._answer(request), request))
            return
        from accelerate.utils import broadcast_object_list

        accelerator = self.trainer.accelerator
        payload = None
        if accelerator.is_main_process:
            output = self._answer(request)
            payload = (
                output["prompt_ids"],
                output["completion_ids"],
                output["logprobs"],
                output.get("logprob_token_ids"),
            )
        holder = [payload]
        broadcast_object_list(holder, from_process=0)
        self.kept.extend(server_steps(holder[0], request, accelerator.process_index))
