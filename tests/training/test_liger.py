"""train.liger_kernels (issue 52's lever): where Liger's Triton kernels cannot run, the run says so before it
trains. Their speed and the canary with them on are GPU measurements (benchmarks/gpu_grpo.py, chunked-2k-liger)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.grpo import apply_liger_kernels


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"use_cpu": True, "bf16": False}, "use_vllm, liger_kernels and the unsloth backend need a GPU"),
        ({"backend": "unsloth"}, "liger_kernels needs backend trl"),
    ],
)
def test_settings_liger_cannot_use_are_refused(values, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(liger_kernels=True, **values)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only refusal")
def test_without_a_gpu_the_model_is_left_as_it_was():
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    )
    mlp_forward = model.model.layers[0].mlp.forward
    with pytest.raises(PipelineError, match="liger_kernels are Triton GPU kernels, and no CUDA GPU is visible"):
        apply_liger_kernels(model)
    assert model.model.layers[0].mlp.forward == mlp_forward
