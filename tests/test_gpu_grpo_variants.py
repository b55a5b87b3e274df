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


def test_overlap_figures_leave_out_the_steps_with_no_decode_beside_them():
    """An overlapped run's last step trains alone (nothing left to decode for), at about half the overlapped
    step's time on one H200: averaging it in made the overlap look faster than its steady state."""
    import polars as pl

    wide = pl.DataFrame({"step": [1, 2, 3, 4, 5, 6], "time/step": [22.0, 14.0, 13.0, 15.0, 14.0, 8.0]})
    on_policy = GPU_GRPO.steady_steps(wide, {"overlap_generation": False})
    assert on_policy["step"].to_list() == [2, 3, 4, 5, 6]
    overlapped = GPU_GRPO.steady_steps(wide, {"overlap_generation": True, "overlap_request_steps": 1})
    assert overlapped["step"].to_list() == [2, 3, 4, 5]
    assert overlapped["time/step"].mean() == 14.0
    two_per_request = GPU_GRPO.steady_steps(wide, {"overlap_generation": True, "overlap_request_steps": 2})
    assert two_per_request["step"].to_list() == [2, 3, 4]
    # a run too short to lose its tail keeps what it has
    short = GPU_GRPO.steady_steps(wide.head(2), {"overlap_generation": True, "overlap_request_steps": 1})
    assert short["step"].to_list() == [2]
