"""train.compile_layers (issue 52's regional torch.compile): the policy's decoder layers' norms, MLP and attention
projections compiled in place, LoRA included, as the same few graphs whatever the number of layers, give the eager
loss and LoRA gradient on the preset's path (the shared prompt pass and the chunked
backward of train.backward_chunk_tokens), keep every parameter's name (checkpoints, the adapter and the weight
sync see the same model), and are refused where they cannot apply. The tiny Llama, traced by Dynamo and
differentiated by AOTAutograd as on the GPU (``aot_eager``: Inductor's CPU code would test a compiler the GPU does
not use, at a minute and a half); the speed is a GPU measurement (benchmarks/gpu_grpo.py)."""

from __future__ import annotations

import pytest

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.speed.chunked_backward import ChunkedBackward
from arc_pipeline.training.speed.compiled_layers import compile_decoder_layers, compiled_regions, decoder_layers
from arc_pipeline.training.speed.shared_prompt import SharedPromptForward
from tests.numerics import assert_reordered_close, reordered_sum_tolerance
from tests.training.speed.test_chunked_backward import (
    config,
    loss_and_gradient,
    micro_batch_terms,
    trainer_and_micro_batch,
)

pytestmark = pytest.mark.slow


def test_compiled_layers_give_the_eager_loss_and_gradient(tiny_model, refinement_dataset, tmp_path):
    trainer, batch = trainer_and_micro_batch(config(), tiny_model, refinement_dataset(2), tmp_path)
    shared = SharedPromptForward().attach(trainer)
    ChunkedBackward(2 * (batch["prompt_ids"].shape[1] + 8), shared_prompt=shared).attach(trainer)
    eager_loss, eager_grad = loss_and_gradient(trainer, batch)
    names = [name for name, _ in trainer.model.named_parameters()]

    layers = decoder_layers(trainer.model)
    assert (
        compile_decoder_layers(trainer.model, backend="aot_eager")
        == len(layers)
        == trainer.model.config.num_hidden_layers
    )
    regions = [region for layer in layers for region in compiled_regions(layer)]
    assert all(region._compiled_call_impl is not None for region in regions)  # each region's call is the compiled one
    compiled_loss, compiled_grad = loss_and_gradient(trainer, batch)

    assert [name for name, _ in trainer.model.named_parameters()] == names
    terms = micro_batch_terms(trainer, batch)
    tolerance = reordered_sum_tolerance(terms)
    assert compiled_loss == pytest.approx(eager_loss, rel=tolerance, abs=tolerance)
    assert_reordered_close(compiled_grad, eager_grad, terms, "LoRA gradient")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"backend": "unsloth"}, "compile_layers needs backend trl"),
        ({"torch_compile": True}, "compile_layers and torch_compile: choose one"),
        ({"fused_lora": True}, "compile_layers and fused_lora: choose one"),
    ],
)
def test_settings_compile_layers_cannot_use_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(compile_layers=True, **values)


def test_each_decoder_layer_is_compiled_with_dynamic_shapes(tiny_model, monkeypatch):
    """train.compile_layers compiles the norms, MLP and attention projections of every decoder layer, with dynamic
    shapes, and nothing else."""
    import torch
    from transformers import AutoModelForCausalLM

    calls = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: calls.append((type(self).__name__, kwargs)))
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert compile_decoder_layers(model, backend="aot_eager") == model.config.num_hidden_layers
    per_layer = ["LlamaRMSNorm", "LlamaRMSNorm", "LlamaMLP", "Linear", "Linear", "Linear", "Linear"]
    assert sorted(name for name, _ in calls) == sorted(per_layer * model.config.num_hidden_layers)
    assert all(kwargs == {"dynamic": True, "backend": "aot_eager"} for _, kwargs in calls)


def test_more_layers_compile_no_more_graphs():
    """Dynamo caps a function's graphs at ``recompile_limit`` (8) and runs the calls past it eager: a compiled
    region that specialised on its layer (the whole layer does, on its key/value cache's index) left 24 of the 8B
    model's 32 layers uncompiled. A pass of the project's own prompt cache (it grows by one layer per layer) through
    12 layers compiles exactly the graphs of a pass through 2."""
    import torch
    from torch._dynamo.testing import CompileCounter
    from transformers import LlamaConfig, LlamaForCausalLM

    from arc_pipeline.training.speed.shared_prompt import _cache_classes

    cache_class, recording_layer, _ = _cache_classes()

    def graphs(layers: int) -> int:
        torch._dynamo.reset()
        config = LlamaConfig(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=1,
            num_key_value_heads=1,
            num_hidden_layers=layers,
        )
        model = LlamaForCausalLM(config)
        counter = CompileCounter()
        compile_decoder_layers(model, backend=counter)
        ids = torch.randint(0, 256, (1, 12))
        model(input_ids=ids, past_key_values=cache_class(layer_class_to_replicate=recording_layer))
        return counter.frame_count

    assert graphs(12) == graphs(2) > 0


def test_a_model_without_decoder_layers_is_an_error():
    import torch

    with pytest.raises(PipelineError, match="compile_layers: no decoder layer found in Linear"):
        compile_decoder_layers(torch.nn.Linear(2, 2))
