"""Generation overlapped with training (arc_pipeline/training/processes/overlap.py), in TRL's real GRPOTrainer.

vLLM's server mode cannot run on a CPU (its weight sync is NCCL), so the server here is a stand-in that
answers TRL's client call with deterministic completions after a delay, and records when and with which
weights each request ran; the same stand-in plays the colocated engine (its own ``generate``, called on the
overlap's thread: tests/training/processes/test_colocated_request_thread.py shows a real engine answering there).
Everything else is the real trainer on the tiny model: its data loader, sampler, loss, importance-sampling
correction and training loop. The real server ran on the lent GPUs (benchmarks/README.md).
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from dataclasses import dataclass

import pytest
from test_grpo import cpu_config
from training_helpers import grpo_trainer, refinement_rows

from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.processes.overlap import OverlappedGeneration

SERVER_SECONDS = 0.6  # long beside a tiny model's step, so that a request running beside training shows


@dataclass
class Request:
    prompts: list[list[int]]
    weights: int  # weight syncs the server had received when the request started
    thread: str
    started: float
    ended: float = 0.0
    released: bool = False  # a held request: its event was set before the timeout


class StandInServer:
    """TRL's server-mode engine (``trainer.vllm_generation``) and its client, both answered here; with ``mode``
    "colocate", the engine in the training process (its ``generate`` is the request)."""

    temperature, top_p, top_k, min_p, repetition_penalty = 1.0, 1.0, 0, None, 1.0
    logprobs, structured_outputs_regex, generation_kwargs = 0, None, {}

    def __init__(self, max_completion_length: int, vocab: int, mode: str = "server") -> None:
        self.mode = mode
        self.hold: dict[int, threading.Event] = {}  # request index -> answer only once it is set (or after 60 s)
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
        """The engine's own call: one row per completion, as TRL's server and colocate branches return it."""
        if self.mode == "colocate":  # one completion per prompt row, as colocate's vLLM call (n=1) makes them
            output = self._answer(prompts, 1, sample_of=lambda row: row % num_generations)
            return output["prompt_ids"], output["completion_ids"], output["logprobs"], None
        output = self._answer(prompts[::num_generations], num_generations)
        prompt_ids = [ids for ids in output["prompt_ids"] for _ in range(num_generations)]
        return prompt_ids, output["completion_ids"], output["logprobs"], None

    def _answer(self, prompts: list[list[int]], n: int, sample_of=lambda row: 0) -> dict:
        with self.busy:
            request = Request(prompts, self.weights, threading.current_thread().name, time.monotonic())
            self.requests.append(request)
            time.sleep(SERVER_SECONDS)
            if (event := self.hold.get(len(self.requests) - 1)) is not None:
                request.released = event.wait(timeout=60)
            completions = []
            for row, prompt in enumerate(prompts):
                for sample in range(sample_of(row), sample_of(row) + n):
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


def zero_reward(completions, **_):
    return [0.0] * len(completions)


def server_mode_trainer(tiny_model, dataset, run_dir, reward=zero_reward, mode="server", **overrides):
    """``(trainer, stand-in server)``: TRL's trainer on the tiny model wired to the stand-in server as server mode's
    constructor would have wired it (it would also have connected to a real server)."""
    config = cpu_config(**{"vllm_importance_sampling_correction": True, "num_generations": 4, **overrides})
    trainer, _ = grpo_trainer(config, tiny_model, dataset, run_dir, reward)
    server = StandInServer(config.max_completion_length, trainer.model.config.vocab_size, mode)
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, server, -1
    return trainer, server


def run(
    tiny_model,
    dataset,
    run_dir,
    overlap: bool,
    steps: int,
    request_steps: int = 1,
    hold_until_step=None,
    mode="server",
    decode_ahead=True,
):
    """Train ``steps`` steps against the stand-in server: (server, prompts trained per step, step start times,
    the overlap object or None). ``hold_until_step`` {request index: step}: that request is answered only once
    that step has begun training (or after a timeout, which the request records)."""
    trainer, server = server_mode_trainer(tiny_model, dataset, run_dir, mode=mode, max_steps=steps)
    hold_until_step = hold_until_step or {}
    server.hold = {index: threading.Event() for index in hold_until_step}
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
        for index, step in hold_until_step.items():
            if trainer.state.global_step >= step:
                server.hold[index].set()
        return training_step(*args, **kwargs)

    trainer.training_step = timed_training_step
    overlapped = OverlappedGeneration(request_steps, decode_ahead=decode_ahead).attach(trainer) if overlap else None
    trainer.train()
    assert trainer.state.global_step == steps
    return server, trained, step_started, overlapped


@pytest.mark.parametrize("mode", ["server", "colocate"])
def test_the_next_steps_completions_are_sampled_while_this_step_trains(tiny_model, tmp_path, mode):
    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 16)
    steps = 4
    plain, plain_trained, _, _ = run(tiny_model, dataset, tmp_path / "plain", overlap=False, steps=steps, mode=mode)
    server, trained, step_started, overlapped = run(
        tiny_model, dataset, tmp_path / "overlap", overlap=True, steps=steps, mode=mode
    )

    # the trainer trained on exactly the batches it takes without overlap, in the same order
    assert trained == plain_trained and len({tuple(batch) for batch in trained}) == steps
    # one server request per step, none wasted after the last step
    assert len(server.requests) == len(plain.requests) == steps
    assert [r.prompts for r in server.requests] == [r.prompts for r in plain.requests]
    assert overlapped.prefetched_steps == steps - 1 and overlapped.synchronous_steps == 1
    # step 0 waits for its own request; step t+1's was sent right after step t's weight sync (t+1 syncs), from
    # rank 0's background thread (colocate: every rank's): its completions are exactly one update old
    assert server.requests[0].thread == threading.main_thread().name
    for step, request in enumerate(server.requests[1:], start=1):
        assert request.weights == step and request.thread == "overlap-generation"
    # ...and it ran while step t trained: a micro-batch of step t started before the request ended
    per_step = len(step_started) // steps
    for step, request in enumerate(server.requests[1:], start=1):
        assert step_started[(step - 1) * per_step] < request.ended
    # without overlap every request is synchronous and made after that step's sync
    assert [r.weights for r in plain.requests] == list(range(1, steps + 1))


def test_a_colocated_request_that_fails_on_its_thread_stops_training_with_the_engines_error(tiny_model, tmp_path):
    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 16)
    trainer, engine = server_mode_trainer(tiny_model, dataset, tmp_path / "run", mode="colocate", max_steps=3)
    answer = engine.generate

    def generate(*args, **kwargs):
        if threading.current_thread().name == "overlap-generation":
            raise MemoryError("CUDA out of memory while decoding")
        return answer(*args, **kwargs)

    engine.generate = generate
    OverlappedGeneration().attach(trainer)
    with pytest.raises(RuntimeError, match="colocated engine's request failed: CUDA out of memory while decoding"):
        trainer.train()
    assert trainer.state.global_step == 1  # the synchronous first step trained; the second took the failed answer


def test_the_switch_interval_holds_while_training_and_is_given_back(tiny_model, tmp_path):
    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 16)
    trainer, engine = server_mode_trainer(tiny_model, dataset, tmp_path / "run", mode="colocate", max_steps=3)
    answer, seen = engine.generate, []

    def generate(*args, **kwargs):
        seen.append((threading.current_thread().name, sys.getswitchinterval()))
        return answer(*args, **kwargs)

    engine.generate = generate
    before = sys.getswitchinterval()
    overlapped = OverlappedGeneration(switch_interval_ms=0.25).attach(trainer)
    try:
        trainer.train()
    finally:
        overlapped.finish()
    assert {name for name, _ in seen} == {threading.main_thread().name, "overlap-generation"}
    # the synchronous first request and the decode thread's later ones all ran under the interval set
    assert all(interval == pytest.approx(0.00025) for _, interval in seen)
    assert sys.getswitchinterval() == before


def test_two_steps_per_request_are_sent_every_second_step_two_steps_ahead(tiny_model, tmp_path):
    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 16)
    steps = 6
    plain, plain_trained, _, _ = run(tiny_model, dataset, tmp_path / "plain", overlap=False, steps=steps)
    # the request for steps 3-4 is answered only once step 2 trains: a trainer that waited for it first would stall
    server, trained, step_started, overlapped = run(
        tiny_model, dataset, tmp_path / "overlap", overlap=True, steps=steps, request_steps=2, hold_until_step={2: 2}
    )

    # the same batches in the same order, and the server asked for each step's prompts exactly once, in order
    assert trained == plain_trained
    assert [p for r in server.requests for p in r.prompts] == [p for r in plain.requests for p in r.prompts]
    per_request = [len(r.prompts) // len(plain.requests[0].prompts) for r in server.requests]
    # step 0 alone and synchronously; then steps 1-2 (sent during step 0), 3-4 (during step 1), 5 (during step 3)
    assert per_request == [1, 2, 2, 1]
    assert server.requests[0].thread == threading.main_thread().name
    assert all(r.thread == "overlap-generation" for r in server.requests[1:])
    assert overlapped.synchronous_steps == 1 and overlapped.prefetched_steps == steps - 1
    assert overlapped.requests_sent == 3
    # the weights go to the server only when it is idle (the stand-in asserts it) and right before a request:
    # syncs 1 (step 0), 2 (step 1), 3 (step 3); TRL's syncs at steps 2, 4 and 5 wait for the next request
    assert [r.weights for r in server.requests] == [1, 1, 2, 3]
    # the request for steps 3-4 was sent during step 1 and step 2 trained while it was in flight (the stand-in
    # held its answer until then, whatever the machine's speed): steps 3 and 4 train on completions two and
    # three updates old
    per_step = len(step_started) // steps
    third = server.requests[2]
    assert third.released, "step 2 did not start while the request for steps 3-4 was in flight"
    assert step_started[1 * per_step] < third.started < step_started[2 * per_step] < third.ended


def test_without_the_decode_ahead_a_step_that_needs_completions_decodes_its_own_and_the_next_steps(
    tiny_model, tmp_path
):
    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 16)
    steps = 5
    plain, plain_trained, _, _ = run(
        tiny_model, dataset, tmp_path / "plain", overlap=False, steps=steps, mode="colocate"
    )
    engine, trained, step_started, overlapped = run(
        tiny_model,
        dataset,
        tmp_path / "batched",
        overlap=True,
        steps=steps,
        request_steps=2,
        mode="colocate",
        decode_ahead=False,
    )

    # the same batches in the same order, each step's prompts asked for exactly once
    assert trained == plain_trained
    assert [p for r in engine.requests for p in r.prompts] == [p for r in plain.requests for p in r.prompts]
    # steps 0-1, 2-3 and the last step alone, each request made on the training thread (so nothing decodes while
    # a step trains) once the step before its first has trained, and answered within its first micro-batch (which
    # holds TRL's generation)
    per_request = [len(r.prompts) // len(plain.requests[0].prompts) for r in engine.requests]
    assert per_request == [2, 2, 1]
    assert {r.thread for r in engine.requests} == {threading.main_thread().name}
    per_step = len(step_started) // steps
    assert per_step > 1
    for request, first_step in zip(engine.requests, (0, 2, 4), strict=True):
        assert step_started[first_step * per_step] < request.started < request.ended
        assert request.ended < step_started[first_step * per_step + 1]
    assert overlapped.synchronous_steps == 3 and overlapped.prefetched_steps == 2 and overlapped.requests_sent == 3
    # one weight sync per request, right before it: steps 1 and 3 train on completions one update old
    assert [r.weights for r in engine.requests] == [1, 2, 3]


def test_the_correction_from_the_loss_forward_is_trls_without_its_extra_forward(tiny_model, tmp_path):
    import torch

    from arc_pipeline.training.speed.correction import CorrectionFromLossForward

    dataset = distinct_prompts_dataset(tiny_model, tmp_path / "refine.parquet", 8)
    results = {}
    for fused in (False, True):
        torch.manual_seed(0)
        trainer, _ = server_mode_trainer(
            tiny_model,
            dataset,
            tmp_path / f"fused-{fused}",
            reward=lambda completions, **_: [float(len(set(text))) for text in completions],  # advantages != 0
            vllm_importance_sampling_mode="token_truncate",
            vllm_importance_sampling_clip_max=3.0,
        )
        correction = CorrectionFromLossForward().attach(trainer) if fused else None
        no_grad_forwards = []
        forward = trainer._get_per_token_logps_and_entropies

        def counting(*args, _forward=forward, _seen=no_grad_forwards, **kwargs):
            _seen.append(not torch.is_grad_enabled())
            return _forward(*args, **kwargs)

        trainer._get_per_token_logps_and_entropies = counting
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # set by train()
        batch = next(iter(trainer.get_train_dataloader()))
        inputs = trainer._generate_and_score_completions(batch)
        prepare_forwards = sum(no_grad_forwards)
        loss = trainer.compute_loss(trainer.model, inputs)
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(loss, params)
        results[fused] = (inputs, loss.detach(), grads, prepare_forwards, correction, trainer)

    plain_inputs, plain_loss, plain_grads, plain_forwards, _, _ = results[False]
    inputs, loss, grads, forwards, correction, trainer = results[True]
    # TRL's path ran one forward without gradient for the old-policy log-probs besides the reference model's
    # (beta > 0); this one the reference model's alone
    assert trainer.beta > 0 and plain_forwards == 2 and forwards == 1 and correction.skipped_forwards == 1
    assert "importance_sampling_ratio" in plain_inputs and "importance_sampling_ratio" not in inputs
    assert "old_per_token_logps" not in inputs and correction.ratios_filled == 1
    # the stand-in's sampling log-probs (-2) are far above the tiny model's, so every token's ratio is far below
    # 1 and differs from token to token (by 2x and more, from the random weights' near-uniform log-probs): a
    # missing ratio would change the loss many times over, a constant one far beyond the tolerances below
    assert bool(plain_inputs["advantages"].abs().max() > 0)
    ratio = plain_inputs["importance_sampling_ratio"][plain_inputs["completion_mask"].bool()]
    assert float(ratio.max()) < 0.1 and float(ratio.max() / ratio.min()) > 2
    # the same loss and gradient. The two ratios come from two float32 forwards of the same weights and tokens
    # (one batched for the whole generation batch, one inside the loss), which may sum in another order: a
    # relative difference of a few float32 epsilons (1.2e-7) per accumulated term, far below 1e-4; the
    # absolute floor is 1e-4 of each tensor's largest element, for elements that cancel to near zero
    torch.testing.assert_close(loss, plain_loss, rtol=1e-4, atol=1e-4 * float(plain_loss.abs()))
    for grad, plain_grad in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(grad, plain_grad, rtol=1e-4, atol=1e-4 * float(plain_grad.abs().max()))
    assert trainer._metrics["train"]["sampling/importance_sampling_ratio/mean"]


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"vllm_importance_sampling_correction": True}, "use_vllm: true"),
        (
            {"use_vllm": True, "vllm_importance_sampling_correction": True, "vllm_enable_sleep_mode": True},
            "vllm_enable_sleep_mode: false",
        ),
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
    TrainConfig(use_vllm=True, vllm_importance_sampling_correction=True, overlap_generation=True)  # colocate


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"overlap_request_steps": 2}, "needs overlap_generation"),
        (
            {
                "overlap_decode_ahead": False,
                "overlap_generation": True,
                "use_vllm": True,
                "vllm_importance_sampling_correction": True,
            },
            "overlap_decode_ahead: false .* needs overlap_generation: true and overlap_request_steps > 1",
        ),
        ({"overlap_switch_interval_ms": 0.5}, "overlap_switch_interval_ms needs overlap_generation"),
        ({"overlap_training_first": True}, "overlap_generation: true and vllm_mode colocate"),
        (
            {
                "overlap_training_first": True,
                "overlap_generation": True,
                "use_vllm": True,
                "vllm_mode": "server",
                "vllm_importance_sampling_correction": True,
            },
            "overlap_generation: true and vllm_mode colocate",
        ),
        ({"importance_sampling_from_loss_forward": True}, "vllm_importance_sampling_correction"),
        (
            {
                "importance_sampling_from_loss_forward": True,
                "use_vllm": True,
                "vllm_importance_sampling_correction": True,
                "num_iterations": 2,
            },
            "num_iterations: 1",
        ),
    ],
)
def test_the_overlap_depth_and_the_fused_correction_name_what_they_need(overrides, named):
    with pytest.raises(ValueError, match=named):
        TrainConfig(**overrides)


def test_each_rank_keeps_its_own_rows_of_every_step_a_request_holds():
    """A request for two steps of two ranks: the server answers block by block, rank by rank (the order
    _launch_next sends the prompts in); rank 1 must keep its own rows of each step, in step order."""
    from types import SimpleNamespace

    from arc_pipeline.training.processes.overlap import request_prompts
    from arc_pipeline.training.processes.overlap_requests import Request

    n = 2  # completions per prompt
    prompts = {(block, rank): [[block, rank, i] for i in range(2)] for block in range(2) for rank in range(2)}
    # TRL repeats each prompt n times; every_rank[rank][block] as _launch_next gathers it
    every_rank = [[[p for p in prompts[(block, rank)] for _ in range(n)] for block in range(2)] for rank in range(2)]
    # what the server returns for the unique prompts in the order they were sent
    order = request_prompts(every_rank, n)
    assert order == [prompts[(block, rank)][i] for block in range(2) for rank in range(2) for i in range(2)]
    answer = {
        "prompt_ids": order,
        "completion_ids": [[*prompt, sample] for prompt in order for sample in range(n)],
        "logprobs": [[[-float(sample)]] for _prompt in order for sample in range(n)],
    }
    overlapped = OverlappedGeneration(request_steps=2)
    # rank 1 of two, made the main process here so that it reads the answer itself (no broadcast needed)
    overlapped.trainer = SimpleNamespace(accelerator=SimpleNamespace(is_main_process=True, process_index=1))
    mine = every_rank[1]
    request = Request(blocks=mine, rows=[[4, 4], [4, 4]], num_generations=n, output=answer)
    request.done.set()
    overlapped._keep(request)

    assert [kept_prompts for kept_prompts, _ in overlapped.kept] == mine
    for block, (_, (prompt_ids, completion_ids, logprobs, _)) in enumerate(overlapped.kept):
        expected = [[block, 1, i, sample] for i in range(2) for sample in range(n)]
        assert completion_ids == expected
        assert prompt_ids == [[block, 1, i] for i in range(2) for _ in range(n)]
        assert logprobs == [[[-float(sample)]] for _ in range(2) for sample in range(n)]


def test_a_group_split_over_two_ranks_is_asked_for_once_and_each_rank_keeps_its_half():
    """Two ranks, each training half of every step's one group (num_generations 4, 2 rows a rank): the request
    asks each step's prompt once, and each rank keeps its half of that step's four completions, step by step.
    Asking per rank sent every prompt twice (the server decoded twice the sequences) and gave the second step the
    first step's second copy."""
    from types import SimpleNamespace

    from arc_pipeline.training.processes.overlap import request_prompts
    from arc_pipeline.training.processes.overlap_requests import Request

    n = 4
    step_prompts = [[100 + block] for block in range(2)]
    every_rank = [[[step_prompts[block]] * 2 for block in range(2)] for _rank in range(2)]  # [rank][block] rows
    unique = request_prompts(every_rank, n)
    assert unique == step_prompts
    answer = {
        "prompt_ids": unique,
        "completion_ids": [[*prompt, sample] for prompt in unique for sample in range(n)],
        "logprobs": [[[-float(sample)]] for _prompt in unique for sample in range(n)],
    }
    for rank in range(2):
        overlapped = OverlappedGeneration(request_steps=2)
        overlapped.trainer = SimpleNamespace(accelerator=SimpleNamespace(is_main_process=True, process_index=rank))
        request = Request(blocks=every_rank[rank], rows=[[2, 2], [2, 2]], num_generations=n, output=answer)
        request.done.set()
        overlapped._keep(request)
        for block, (_, (prompt_ids, completion_ids, _, _)) in enumerate(overlapped.kept):
            assert prompt_ids == [step_prompts[block]] * 2
            assert completion_ids == [[*step_prompts[block], sample] for sample in (2 * rank, 2 * rank + 1)]
    with pytest.raises(ValueError, match="not whole groups of num_generations 4"):
        request_prompts([[[[1]] * 3]], n)
