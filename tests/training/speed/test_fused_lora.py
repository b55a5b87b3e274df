"""train.fused_lora (issue 52's LoRA lever): each LoRA projection and its frozen base as one autograd function
gives PEFT's output and gradients (input, lora_A, lora_B) at rank 1 and above, with a base bias and under
bfloat16 autocast; it steps aside when the adapter is disabled (TRL's reference pass) or merged (a weight sync);
on the preset's path (the shared prompt pass and the chunked backward) it gives the eager loss and LoRA gradient
with every parameter's name kept, and through the stage's train() the same adapter; it is refused where it
cannot apply. The speed is a GPU measurement (benchmarks/lora_projection.py, benchmarks/gpu_grpo.py)."""

from __future__ import annotations

import pytest
import torch

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.speed.chunked_backward import ChunkedBackward
from arc_pipeline.training.speed.fused_lora import fuse_lora_projections
from arc_pipeline.training.speed.shared_prompt import SharedPromptForward
from tests.numerics import assert_reordered_close, reordered_sum_tolerance
from tests.training.speed.test_chunked_backward import (
    assert_same_adapter,
    config,
    loss_and_gradient,
    micro_batch_terms,
    trainer_and_micro_batch,
    two_step_adapter,
)

WIDTH, TOKENS = 48, 10


def two_projections(rank: int, dropout: float = 0.0):
    """A PEFT model of two projections (the first with a bias), LoRA B moved off its zero start so that every
    gradient path carries something."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(WIDTH, 2 * WIDTH), torch.nn.Linear(2 * WIDTH, WIDTH, bias=False))
    lora = LoraConfig(r=rank, lora_alpha=64, use_rslora=True, lora_dropout=dropout, target_modules=["0", "1"])
    model = get_peft_model(base, lora)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    return model


def output_and_gradients(model, inputs: torch.Tensor, autocast: bool = False):
    model.zero_grad(set_to_none=True)
    x = inputs.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model(x)
    (out.float() * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    return out.detach(), x.grad, grads


def assert_close_under_autocast(actual, expected) -> None:
    """Output, input gradient and adapter gradients under bfloat16 autocast within the bounds the test below
    explains: 2% of the scale for the output, 5% for the gradients."""
    out_bf16, grad_x_bf16, grads_bf16 = actual
    assert out_bf16.dtype == expected[0].dtype == torch.bfloat16
    scale = float(expected[0].abs().max())
    torch.testing.assert_close(out_bf16.float(), expected[0].float(), rtol=0.02, atol=0.02 * scale)
    scale = float(expected[1].abs().max())
    torch.testing.assert_close(grad_x_bf16, expected[1], rtol=0.05, atol=0.05 * scale)
    assert grads_bf16.keys() == expected[2].keys()
    for name, grad in grads_bf16.items():
        reference = expected[2][name]
        torch.testing.assert_close(grad, reference, rtol=0.05, atol=0.05 * float(reference.abs().max()))


@pytest.mark.parametrize("rank", [1, 3])
def test_fused_projections_give_peft_output_and_gradients(rank):
    model = two_projections(rank)
    inputs = torch.randn(2, TOKENS, WIDTH)
    expected = output_and_gradients(model, inputs)
    expected_bf16 = output_and_gradients(model, inputs, autocast=True)
    with torch.no_grad(), model.disable_adapter():
        base_only = model(inputs)

    assert fuse_lora_projections(model) == 2
    out, grad_x, grads = output_and_gradients(model, inputs)
    terms = 2 * TOKENS * 2 * WIDTH  # the longest sum: tokens x widest contraction
    assert_reordered_close(out, expected[0], terms, "output")
    assert_reordered_close(grad_x, expected[1], terms, "input gradient")
    assert grads.keys() == expected[2].keys() and len(grads) == 4  # lora_A and lora_B of both projections
    for name, grad in grads.items():
        assert grad.dtype == torch.float32  # the adapter's own dtype, as PEFT's
        assert_reordered_close(grad, expected[2][name], terms, name)

    # under bfloat16 autocast: the output in bfloat16 as PEFT's, equal to within bfloat16 rounding. Both ways
    # accumulate products in float32 and round to bfloat16 (unit roundoff 2**-8, 0.4%) at different places: the
    # output passes at most four such roundings in either way (product, branch, scale, sum), so 2% of the scale;
    # the gradients twice as many (the output's gradient, then the products back), so 5%. A bug (a missing
    # scale, a dropped term) moves them by tens of per cent, as the float32 checks above show
    assert_close_under_autocast(output_and_gradients(model, inputs, autocast=True), expected_bf16)

    with torch.no_grad(), model.disable_adapter():  # TRL's reference pass: the base projections alone
        torch.testing.assert_close(model(inputs), base_only, rtol=0, atol=0)
    with torch.no_grad():
        assert not torch.allclose(model(inputs), base_only)
    model.merge_adapter()  # as a weight sync merges: the branch is in the base weight, not to be added again
    with torch.no_grad():
        assert_reordered_close(model(inputs), out, terms, "merged output")
    model.unmerge_adapter()


@pytest.mark.slow
def test_fused_lora_gives_the_eager_loss_and_gradient(tiny_model, refinement_dataset, tmp_path):
    trainer, batch = trainer_and_micro_batch(config(), tiny_model, refinement_dataset(2), tmp_path)
    shared = SharedPromptForward().attach(trainer)
    ChunkedBackward(2 * (batch["prompt_ids"].shape[1] + 8), shared_prompt=shared).attach(trainer)
    with torch.no_grad():
        for name, parameter in trainer.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.02)  # off PEFT's zero start: the lora_A gradients are not all zero
    peft_loss, peft_grad = loss_and_gradient(trainer, batch)
    names = [name for name, _ in trainer.model.named_parameters()]

    layers = trainer.model.config.num_hidden_layers
    assert fuse_lora_projections(trainer.model) == 7 * layers  # every projection of every layer
    fused_loss, fused_grad = loss_and_gradient(trainer, batch)

    assert [name for name, _ in trainer.model.named_parameters()] == names
    terms = micro_batch_terms(trainer, batch)
    tolerance = reordered_sum_tolerance(terms)
    assert fused_loss == pytest.approx(peft_loss, rel=tolerance, abs=tolerance)
    assert float(peft_grad.abs().max()) > 0
    assert_reordered_close(fused_grad, peft_grad, terms, "LoRA gradient")


@pytest.mark.slow
def test_train_with_fused_lora_learns_what_train_without_learns(tiny_model, refinement_dataset, tmp_path, monkeypatch):
    """The stage's own train() with ``fused_lora: true`` fuses the policy's projections (after the LoRA went on)
    and ends two optimizer steps at the adapter PEFT's forward gives."""
    from arc_pipeline.training.speed import fused_lora

    fused = []
    fuse = fused_lora.fuse_lora_projections
    monkeypatch.setattr(
        fused_lora, "fuse_lora_projections", lambda model, *kernels: fused.append(fuse(model, *kernels)) or fused[-1]
    )

    dataset = refinement_dataset(4)
    reference = two_step_adapter(tiny_model, dataset, tmp_path / "peft", backward_chunk_tokens=64)
    assert not fused
    adapter = two_step_adapter(tiny_model, dataset, tmp_path / "fused", backward_chunk_tokens=64, fused_lora=True)
    assert fused and fused[0] > 0
    assert_same_adapter(adapter, reference)


def test_lora_with_dropout_is_left_to_peft_and_refused():
    with pytest.raises(PipelineError, match="fused_lora: no plain LoRA projection in PeftModel"):
        fuse_lora_projections(two_projections(1, dropout=0.1))


def test_unsloth_and_fused_lora_are_refused():
    with pytest.raises(ValueError, match="fused_lora needs backend trl"):
        TrainConfig(fused_lora=True, backend="unsloth")
