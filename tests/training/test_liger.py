"""train.liger_kernels (issue 52's lever): where Liger's Triton kernels cannot run, the run says so before it
trains. Their speed and the canary with them on are GPU measurements (benchmarks/gpu_grpo.py, chunked-2k-liger)."""

from __future__ import annotations

import pytest
import torch

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.grpo import train


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
def test_without_a_gpu_training_stops_before_it_reads_anything(tmp_path):
    missing = tmp_path / "absent"
    with pytest.raises(PipelineError, match="liger_kernels: these settings need a CUDA GPU, and none is visible"):
        train(
            TrainConfig(liger_kernels=True),
            missing / "refinement.parquet",
            missing / "model",
            missing / "adapter",
            missing / "metrics.parquet",
        )
    assert not missing.exists()
