"""train.fused_lora_kernels: triton (issue 52): the three Triton kernels of a rank-1 LoRA branch compute their
products (odd shapes, several programs, the token sums split over programs), and the projection they make gives
PEFT's output and gradients, in float32 and under bfloat16 autocast: tests/training/speed/rank1_kernel_checks.py,
run in Triton's interpreter on the CPU in a process of its own. The speed is a GPU measurement
(benchmarks/lora_projection.py's ``triton`` way, benchmarks/gpu_grpo.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arc_pipeline.errors import PipelineError
from arc_pipeline.training.config import TrainConfig
from arc_pipeline.training.speed.fused_lora import fuse_lora_projections
from tests.training.speed.test_fused_lora import two_projections

CHECKS = Path(__file__).with_name("rank1_kernel_checks.py")


def test_the_kernels_and_their_projection_in_tritons_interpreter():
    result = subprocess.run(
        [sys.executable, str(CHECKS)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed: ") == 2, result.stdout


def test_triton_kernels_are_refused_where_they_cannot_run():
    with pytest.raises(PipelineError, match="rank-1 branches; LoRA rank"):
        fuse_lora_projections(two_projections(3), "triton")
    message = "fused_lora_kernels triton needs fused_lora: true, lora_r 1 and a GPU"
    for settings in ({}, {"fused_lora": True, "lora_r": 2}, {"fused_lora": True, "use_cpu": True, "bf16": False}):
        with pytest.raises(ValueError, match=message):
            TrainConfig(fused_lora_kernels="triton", **settings)
