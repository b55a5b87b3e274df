"""Every variant of benchmarks/gpu_grpo.py is a train config the stage accepts, so a lent GPU's minutes are not
spent on a variant the settings checks refuse at its start (a setting renamed, a combination made invalid)."""

from __future__ import annotations

import pytest

from arc_pipeline.training.config import TrainConfig
from tests.benchmark_scripts import load_benchmark

GPU_GRPO = load_benchmark("gpu_grpo")


@pytest.mark.parametrize("name", sorted(GPU_GRPO.VARIANTS))
def test_each_variant_is_a_valid_train_config(name):
    config = TrainConfig(**{**GPU_GRPO.BASE_SETTINGS, **GPU_GRPO.VARIANTS[name]})
    assert config.use_vllm
