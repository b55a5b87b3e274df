"""The chunked backward (train.backward_chunk_tokens) gives TRL's own loss and gradient of a micro-batch.

A real TRL GRPOTrainer on the tiny random Llama with a LoRA builds a real micro-batch (generation, rewards,
advantages, reference log-probs); its completions are then cut to different lengths, so that the loss types
that normalise by tokens and by sequences weigh them differently. The micro-batch's loss and LoRA gradient
through TRL's compute_loss are the reference; the chunked ones must equal them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerCallback

from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.speed.chunked_backward import ChunkedBackward, chunk_weights, plan_chunks
from tests.numerics import FLOAT32_UNIT_ROUNDOFF, assert_reordered_close, model_sum_terms, reordered_sum_tolerance
from tests.training.training_helpers import grpo_trainer

pytestmark = pytest.mark.slow

COMPLETION_LENGTHS = [8, 3, 8, 5, 1, 8, 2, 6]  # the micro-batch's 8 completions, cut to these lengths


class VaryingReward:
    """Rewards that differ within the group, so every completion has an advantage."""

    __name__ = "varying"

    def __call__(self, completions, **_) -> list[float]:
        return [float(i % 3) for i in range(len(completions))]


def config(**overrides) -> TrainConfig:
    values = dict(
        use_cpu=True,
        bf16=False,
        report_to=["none"],
        num_generations=8,
        gradient_accumulation_steps=1,
        max_completion_length=8,
        max_seq_length=2048,
        mask_truncated_completions=False,
        temperature=3.0,
        top_k=4,
        top_p=1.0,
        repetition_penalty=1.0,
        beta=0.02,
        execution_workers=1,
    )
    return TrainConfig(**{**values, **overrides})


def trainer_and_micro_batch(train_config: TrainConfig, tiny_model, dataset_path, tmp_path):
    torch.manual_seed(0)
    trainer, dataset = grpo_trainer(train_config, tiny_model, dataset_path, tmp_path / "run", VaryingReward())
    rows = [dataset[i] for i in list(iter(trainer._get_train_sampler()))[: trainer.args.generation_batch_size]]
    batch = trainer._generate_and_score_completions(rows)
    assert batch["completion_ids"].shape == (8, 8)  # a random model never ends: all full length
    mask = torch.zeros_like(batch["completion_mask"])
    for row, length in enumerate(COMPLETION_LENGTHS):
        mask[row, :length] = 1
    batch["completion_mask"] = mask
    if "num_items_in_batch" in batch:
        batch["num_items_in_batch"] = mask.sum()
    if train_config.gradient_checkpointing:  # as the training loop does at its start (transformers 5: non-reentrant)
        trainer.model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
        )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test does not run
    return trainer, batch


def micro_batch_terms(trainer, batch) -> int:
    """The longest chain of float32 sums behind the micro-batch's loss and gradient (tests/numerics.py)."""
    tokens = batch["prompt_ids"].numel() + batch["completion_ids"].numel()
    return model_sum_terms(trainer.model.config, tokens)


def loss_and_gradient(trainer, batch) -> tuple[float, torch.Tensor]:
    model = trainer.model
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, batch)
    loss.backward()
    grads = [p.grad.flatten() for p in model.parameters() if p.requires_grad and p.grad is not None]
    return float(loss), torch.cat(grads)


@pytest.mark.parametrize("loss_type", ["bnpo", "grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize("budget", ["pairs", "singles"])
def test_chunks_give_the_micro_batchs_loss_and_gradient(
    loss_type, checkpointed, budget, tiny_model, refinement_dataset, tmp_path
):
    """pairs: chunks of two completions (each pair's longest fits); singles: one completion per chunk, those
    longer than 4 tokens over the budget, so they keep the model's checkpointing."""
    train_config = config(loss_type=loss_type, gradient_checkpointing=checkpointed)
    trainer, batch = trainer_and_micro_batch(train_config, tiny_model, refinement_dataset(2), tmp_path)
    reference_loss, reference_grad = loss_and_gradient(trainer, batch)
    assert reference_grad.abs().sum() > 0

    prompt_width = batch["prompt_ids"].shape[1]
    tokens = 2 * (prompt_width + 8) if budget == "pairs" else prompt_width + 4
    expected = [(0, 2), (2, 4), (4, 6), (6, 8)] if budget == "pairs" else [(row, row + 1) for row in range(8)]
    assert plan_chunks(prompt_width, COMPLETION_LENGTHS, tokens) == expected
    layers = [m for m in trainer.model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    assert bool(layers) == checkpointed
    ChunkedBackward(tokens).attach(trainer)
    chunked_loss, chunked_grad = loss_and_gradient(trainer, batch)

    terms = micro_batch_terms(trainer, batch)
    # the loss averages per-token terms of the order of one (unit-scaled advantages times ratios near one)
    tolerance = reordered_sum_tolerance(terms)
    assert chunked_loss == pytest.approx(reference_loss, rel=tolerance, abs=tolerance)
    assert_reordered_close(chunked_grad, reference_grad, terms, "LoRA gradient")
    # checkpointing is back on where the model had it
    assert all(m.gradient_checkpointing for m in layers)


def test_bnpo_chunks_are_weighted_by_their_tokens(tiny_model, refinement_dataset, tmp_path):
    """Without bnpo's token weights, the chunks' sum is another loss (the weighting is what makes it TRL's)."""
    _, batch = trainer_and_micro_batch(config(loss_type="bnpo"), tiny_model, refinement_dataset(2), tmp_path)
    mask = batch["completion_mask"]
    chunks = plan_chunks(batch["prompt_ids"].shape[1], COMPLETION_LENGTHS, 1)
    assert chunks == [(row, row + 1) for row in range(8)]
    weights = chunk_weights("bnpo", mask, chunks)
    assert weights == pytest.approx([length / sum(COMPLETION_LENGTHS) for length in COMPLETION_LENGTHS])
    assert weights != pytest.approx(chunk_weights("grpo", mask, chunks))


def test_plan_chunks_gives_equal_chunks_within_the_budget():
    assert plan_chunks(10, [5, 5, 5, 5], 30) == [(0, 2), (2, 4)]
    assert plan_chunks(10, [5, 5, 5, 5], 60) == [(0, 4)]
    assert plan_chunks(10, [5, 20, 5], 30) == [(0, 1), (1, 2), (2, 3)]  # 20 + 10 alone fills the budget
    assert plan_chunks(10, [50, 1, 1], 30) == [(0, 1), (1, 2), (2, 3)]  # over the budget alone: a chunk of one
    assert plan_chunks(10, [5, 5, 5, 5, 5], 45) == [(0, 3), (3, 5)]
    # a data-parallel run uses the smallest number of rows per chunk of all processes
    assert plan_chunks(10, [5, 5, 5, 5], 60, agree=lambda rows: min(rows, 1)) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert plan_chunks(10, [], 30) == []
    # rows that do not share a prompt pass hold the prompt each
    assert plan_chunks(10, [5, 5, 5, 5], 22) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    # one shared prompt pass for the micro-batch: a chunk holds its completions from the prompt's last token on
    assert plan_chunks(10, [5, 5, 5, 5], 22, shared_prompt=True) == [(0, 3), (3, 4)]
    assert plan_chunks(10, [5, 5, 5, 5], 24, shared_prompt=True) == [(0, 4)]
    assert plan_chunks(10, [5, 5, 5, 5], 11, shared_prompt=True) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_chunks_leave_the_run_fingerprint_alone(tiny_model, refinement_dataset):
    """Switching chunks on or off resumes the run's checkpoints, also those written before the option existed."""
    from arc_pipeline.training.checkpoints import run_fingerprint

    dataset = refinement_dataset(2)
    whole = run_fingerprint(config(), dataset, tiny_model)
    assert run_fingerprint(config(backward_chunk_tokens=4096), dataset, tiny_model) == whole
    assert "backward_chunk_tokens" not in whole["config"]


def test_unsloth_and_chunks_are_refused():
    with pytest.raises(ValueError, match="backward_chunk_tokens"):
        TrainConfig(backend="unsloth", backward_chunk_tokens=4096)


@dataclass(frozen=True)
class TwoSteps:
    """The LoRA weights before and after two optimizer steps, and the longest chain of float32 sums behind the
    update (tests/numerics.py)."""

    initial: dict[str, torch.Tensor]
    final: dict[str, torch.Tensor]
    terms: int


class InitialAdapter(TrainerCallback):
    """Keeps the LoRA weights as training begins, under the saved adapter's keys."""

    weights: dict[str, torch.Tensor]

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from peft import get_peft_model_state_dict

        self.weights = {key: value.detach().clone() for key, value in get_peft_model_state_dict(model).items()}


def two_step_adapter(tiny_model, dataset, out, **overrides) -> TwoSteps:
    """Two optimizer steps of the stage's own train() (the varying reward added), with plain SGD: its update is
    the learning rate times the clipped gradient, so two runs whose gradients differ by float32 summation order
    end at updates that differ by as little. AdamW divides each element by its own gradient's magnitude: where
    a gradient nearly cancels, the same rounding becomes a relative error of any size in the update."""
    import polars as pl
    from safetensors.torch import load_file

    from arc_pipeline.training.grpo import train

    train_config = config(
        gradient_accumulation_steps=2,
        max_steps=2,
        learning_rate=1.0,
        optim="sgd",
        weight_decay=0.0,
        warmup_ratio=0.0,
        save_steps=100,
        **overrides,
    )
    initial = InitialAdapter()
    train(
        train_config,
        dataset,
        tiny_model,
        out / "adapter",
        out / "metrics.parquet",
        extra_rewards=[(VaryingReward(), 1.0)],
        callbacks=[initial],
    )
    prompt_tokens = int(pl.read_parquet(dataset)["prompt_tokens"].max())
    model_config = SimpleNamespace(**json.loads((Path(tiny_model) / "config.json").read_text()))
    completions = train_config.max_steps * train_config.num_generations
    terms = model_sum_terms(model_config, completions * (prompt_tokens + train_config.max_completion_length))
    return TwoSteps(initial.weights, load_file(out / "adapter" / "adapter_model.safetensors"), terms)


def assert_same_adapter(adapter: TwoSteps, reference: TwoSteps) -> None:
    """``reference`` learned something (a LoRA B moved off zero), both started from the same weights, and
    ``adapter``'s update equals ``reference``'s up to float32 summation order. Each of the two steps also rounds
    the stored weights, by at most half a unit in the last place of the largest weight, in either run."""
    assert any(float(weights.abs().max()) > 0 for key, weights in reference.final.items() if "lora_B" in key)
    assert adapter.final.keys() == reference.final.keys() == reference.initial.keys()
    for key, start in reference.initial.items():
        torch.testing.assert_close(adapter.initial[key], start, rtol=0, atol=0)
        stored = 2 * 2 * FLOAT32_UNIT_ROUNDOFF * float(reference.final[key].abs().max())  # 2 runs x 2 steps
        update, expected = adapter.final[key] - start, reference.final[key] - start
        assert_reordered_close(update, expected, reference.terms, key, rounding=stored)


def test_train_with_chunks_learns_what_train_without_learns(tiny_model, refinement_dataset, tmp_path, monkeypatch):
    """The stage's own train(): two optimizer steps with and without chunks end at the same adapter."""
    from arc_pipeline.training.speed import chunked_backward

    planned = []
    plan = chunked_backward.plan_chunks
    monkeypatch.setattr(chunked_backward, "plan_chunks", lambda *args: planned.append(plan(*args)) or planned[-1])

    dataset = refinement_dataset(4)
    whole = two_step_adapter(tiny_model, dataset, tmp_path / "whole", loss_type="bnpo")
    chunked = two_step_adapter(tiny_model, dataset, tmp_path / "chunked", loss_type="bnpo", backward_chunk_tokens=1)
    # the chunked run cut each micro-batch of 4 completions into 4 chunks
    assert planned and all(chunks == [(0, 1), (1, 2), (2, 3), (3, 4)] for chunks in planned)
    assert_same_adapter(chunked, whole)


def spawn_ranks(run_rank, tmp_path) -> list[dict]:
    """Two gloo ranks of ``run_rank`` (tests/training/speed/ddp_chunks.py); what each saved."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(run_rank, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    return [torch.load(tmp_path / f"rank{rank}.pt") for rank in (0, 1)]


def test_shared_prompt_chunks_under_data_parallel_give_the_all_reduced_gradient(tmp_path):
    """A tiny Llama under DistributedDataParallel, each rank's completions sharing one prompt: chunks over one
    prompt pass (differentiated under no_sync, the prompt's gradient carried to the trainer's backward) give the
    whole micro-batch's all-reduced gradient."""
    from tests.training.speed.ddp_chunks import COMPLETION, PROMPT_WIDTH, ROWS, run_rank_shared, tiny_llama

    ranks = spawn_ranks(run_rank_shared, tmp_path)
    # the all-reduce sums both ranks' micro-batches
    terms = model_sum_terms(tiny_llama().config, 2 * ROWS * (PROMPT_WIDTH + COMPLETION))
    for result in ranks:
        assert result["whole"].abs().sum() > 0
        assert result["prompt_passes"] == 1  # one prompt pass for all the chunks of the micro-batch
        assert_reordered_close(result["chunked"], result["whole"], terms, "gradient")
    torch.testing.assert_close(ranks[0]["whole"], ranks[1]["whole"])


def test_chunks_under_data_parallel_give_the_all_reduced_gradient(tmp_path):
    """Two gloo ranks with DistributedDataParallel: the chunked micro-batch's gradient, all-reduced once by the
    trainer's backward, equals the whole micro-batch's on every rank (tests/training/speed/ddp_chunks.py)."""
    from tests.training.speed.ddp_chunks import COMPLETION, PROMPT, ROWS, VOCABULARY, run_rank

    ranks = spawn_ranks(run_rank, tmp_path)
    terms = 2 * ROWS * (PROMPT + COMPLETION) * VOCABULARY  # both ranks' tokens, summed by the all-reduce
    for result in ranks:
        assert result["whole"].abs().sum() > 0
        assert_reordered_close(result["chunked"], result["whole"], terms, "gradient")
    # all-reduced: both ranks hold the same (averaged) gradient although their data differ
    torch.testing.assert_close(ranks[0]["whole"], ranks[1]["whole"])
    torch.testing.assert_close(ranks[0]["chunked"], ranks[1]["chunked"])
