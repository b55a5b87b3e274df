"""One overlapped generation request (arc_pipeline/training/processes/overlap.py): what it holds, how it is answered
(the vLLM server's client, or the colocated engine's own generate on its CUDA stream), and how the answer is cut
into each step's rows of this rank."""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

# (this rank's prompt rows of a step, the completions of those rows as TRL's generate returns them)
KeptStep = tuple[list[list[int]], tuple]


@dataclass
class Request:
    """A generation request in flight: this rank's prompts of each step it holds, every rank's row count of each
    of those steps, and on rank 0 the thread that asks the server."""

    blocks: list[list[list[int]]]
    rows: list[list[int]]  # rows[block][rank]
    num_generations: int
    thread: threading.Thread | None = None
    output: Any = None  # server: the client's answer; colocate: the engine's (prompt_ids, completion_ids, ...)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def ask_server(engine: Any, request: Request, unique_prompts: list[list[int]]) -> None:
    """Server mode, rank 0: the request's distinct prompts through TRL's client, with the engine's sampling."""
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


def generate_here(inner_generate: Any, stream: Any, request: Request) -> None:
    """Colocate mode: the engine's own generate for all the request's steps at once (more sequences per decode
    step), on the engine's CUDA ``stream`` (None: no GPU)."""
    prompts = [prompt for block in request.blocks for prompt in block]
    try:
        if stream is not None:
            import torch

            torch.cuda.set_device(stream.device)  # the current device is per thread
            on_stream = torch.cuda.stream(stream)
        else:
            on_stream = nullcontext()
        with on_stream:
            request.output = inner_generate(prompts, None, request.num_generations)
    except BaseException as error:  # raised on the training thread when the result is taken
        request.error = error
    finally:
        request.done.set()


def server_steps(payload: tuple, request: Request, process_index: int) -> list[KeptStep]:
    """The server's answer to ``request`` (prompt ids per distinct prompt, then completion ids, log-probs and
    log-prob token ids per row, all ranks' rows block by block), cut into this rank's rows of each step."""
    all_prompt_ids, all_completion_ids, all_logprobs, all_logprob_token_ids = payload
    n = request.num_generations
    all_prompt_ids = [ids for ids in all_prompt_ids for _ in range(n)]
    steps: list[KeptStep] = []
    start = 0
    for block, prompts in enumerate(request.blocks):
        rows = request.rows[block]
        mine = slice(start + sum(rows[:process_index]), start + sum(rows[: process_index + 1]))
        start += sum(rows)
        result = (
            all_prompt_ids[mine],
            all_completion_ids[mine],
            None if all_logprobs is None else all_logprobs[mine],
            None if all_logprob_token_ids is None else all_logprob_token_ids[mine],
        )
        steps.append((prompts, result))
    return steps


def local_steps(output: tuple, request: Request) -> list[KeptStep]:
    """Colocate mode: this rank's own answer, cut into its steps, each as the engine's generate returns it."""
    steps: list[KeptStep] = []
    start = 0
    for prompts in request.blocks:
        mine = slice(start, start + len(prompts))
        start += len(prompts)
        steps.append((prompts, tuple(None if column is None else column[mine] for column in output)))
    return steps
