"""Generation overlapped with training (arc_pipeline/training/overlap.py), in TRL's real GRPOTrainer.

vLLM's server mode cannot run on a CPU (its weight sync is NCCL), so the server here is a stand-in that
answers TRL's client call with deterministic completions after a delay, and records when and with which
weights each request ran. Everything else is the real trainer on the tiny model: its data loader, sampler,
loss, importance-sampling correction and training loop. The real server ran on the lent GPUs
(benchmarks/README.md).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass

import pytest
from test_grpo import cpu_config
from training_helpers import grpo_trainer, refinement_rows

from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.overlap import OverlappedGeneration

SERVER_SECONDS = 0.6  # long beside a tiny model's step, so that a request running beside training shows


@dataclass
class Request:
    prompts: list[list[int]]
    weights: int  # weight syncs the server had received when the request started
    thread: str
    started: float
    ended: float = 0.0


class StandInServer:
    """TRL's server-mode engine (``trainer.vllm_generation``) and its client, both answered here."""

    mode = "server"
    temperature, top_p, top_k, min_p, repetition_penalty = 1.0, 1.0, 0, None, 1.0
    logprobs, structured_outputs_regex, generation_kwargs = 0, None, {}

    def __init__(self, max_completion_length: int, vocab: int) -> None:
        self.max_completion_length = max_completion_length
        self.vocab = vocab
        self.weights = 0
        self.requests: list[Request] = []
        self.vllm_client = StandInClient(self)
        self.busy = threading.Lock()

    def sync_weights(self) -> None:
        assert self.busy.acquire(blocking=False), "weights synced while a request was in flight"
        self.weights += 1
        self.busy.release()

    def generate(self, prompts, images, num_generations, profiler=None):
        """The engine's own (synchronous) call: one row per completion, as TRL's server branch returns it."""
        output = self._answer(prompts[::num_generations], num_generations)
        prompt_ids = [ids for ids in output["prompt_ids"] for _ in range(num_generations)]
        return prompt_ids, output["completion_ids"], output["logprobs"], None

    def _answer(self, prompts: list[list[int]], n: int) -> dict:
        with self.busy:
            request = Request(prompts, self.weights, threading.current_thread().name, time.monotonic())
            self.requests.append(request)
            time.sleep(SERVER_SECONDS)
            completions = []
            for prompt in prompts:
                for sample in range(n):
                    seed = hashlib.sha256(f"{prompt}/{sample}".encode()).digest()
                    completions.append([10 + b % (self.vocab - 20) for b in seed[: self.max_completion_length]])
            request.ended = time.monotonic()
        logprobs = [[[-2.0] for _ in ids] for ids in completions]
        return {"prompt_ids": prompts, "completion_ids": completions, "logprobs": logprobs}


class StandInClient:
    """TRL's ``VLLMClient.generate``: unique prompts, ``n`` completions each."""

    def __init__(self, server: StandInServer) -> None:
        self.server = server

    def generate(self, prompts, n, **sampling):
        return self.server._answer(prompts, n)


def distinct_prompts_dataset(tiny_model, path, n_rows: int):
    """Refinement rows whose prompts all differ, so that a batch taken out of turn would show."""
    from arc_pipeline.io import write_table
    from arc_pipeline.models.folder import load_tokenizer
    from arc_pipeline.schemas import REFINEMENT_SCHEMA

    rows = refinement_rows(load_tokenizer(tiny_model), n_rows)
    for i, row in enumerate(rows):
        row["prompt"] = row["prompt"] + f" Attempt {i}."
    write_table(rows, path, REFINEMENT_SCHEMA)
    return path


def run(tiny_model, dataset, run_dir, overlap: bool, steps: int):
    """Train ``steps`` steps against the stand-in server: (server, prompts trained per step, step start times,
    the overlap object or None)."""
    config = cpu_config(max_steps=steps, vllm_importance_sampling_correction=True, num_generations=4)
    trainer, _ = grpo_trainer(config, tiny_model, dataset, run_dir, lambda completions, **_: [0.0] * len(completions))
    server = StandInServer(config.max_completion_length, trainer.model.config.vocab_size)
    # what server mode's constructor would have set up (it would also have connected to a real server)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, server, -1
    trained: list[list[str]] = []
    generate_and_score = trainer._generate_and_score_completions

    def record(inputs):
        trained.append([example["prompt"] for example in inputs])
        return generate_and_score(inputs)

    trainer._generate_and_score_completions = record
    step_started: list[float] = []
    training_step = trainer.training_step

    def timed_training_step(*args, **kwargs):
        step_started.append(time.monotonic())
        return training_step(*args, **kwargs)

    trainer.training_step = timed_training_step
    overlapped = OverlappedGeneration().attach(trainer) if overlap else None
    trainer.train()
    assert trainer.state.global_step == steps
    return server, trained, step_started, overlapped


def test_the_next_steps_completions_are_sampled_while_this_step_trains(tiny_model, tmp_path):
    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 16)
    steps = 4
    plain, plain_trained, _, _ = run(tiny_model, dataset, tmp_path / "plain", overlap=False, steps=steps)
    server, trained, step_started, overlapped = run(
        tiny_model, dataset, tmp_path / "overlap", overlap=True, steps=steps
    )

    # the trainer trained on exactly the batches it takes without overlap, in the same order
    assert trained == plain_trained and len({tuple(batch) for batch in trained}) == steps
    # one server request per step, none wasted after the last step
    assert len(server.requests) == len(plain.requests) == steps
    assert [r.prompts for r in server.requests] == [r.prompts for r in plain.requests]
    assert overlapped.prefetched_steps == steps - 1 and overlapped.synchronous_steps == 1
    # step 0 waits for its own request; step t+1's was sent right after step t's weight sync (t+1 syncs), from
    # rank 0's background thread: its completions are exactly one update old
    assert server.requests[0].thread == threading.main_thread().name
    for step, request in enumerate(server.requests[1:], start=1):
        assert request.weights == step and request.thread == "overlap-generation"
    # ...and it ran while step t trained: a micro-batch of step t started before the request ended
    per_step = len(step_started) // steps
    for step, request in enumerate(server.requests[1:], start=1):
        assert step_started[(step - 1) * per_step] < request.ended
    # without overlap every request is synchronous and made after that step's sync
    assert [r.weights for r in plain.requests] == list(range(1, steps + 1))


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"use_vllm": True, "vllm_importance_sampling_correction": True}, "vllm_mode 'server'"),
        ({"use_vllm": True, "vllm_mode": "server"}, "vllm_importance_sampling_correction"),
        (
            {
                "use_vllm": True,
                "vllm_mode": "server",
                "vllm_importance_sampling_correction": True,
                "online_multi_turn": True,
            },
            "online_multi_turn",
        ),
    ],
)
def test_overlap_names_the_settings_it_needs(overrides, named):
    with pytest.raises(ValueError, match=named):
        TrainConfig(overlap_generation=True, **overrides)
    TrainConfig(use_vllm=True, vllm_mode="server", vllm_importance_sampling_correction=True, overlap_generation=True)
