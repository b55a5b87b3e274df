"""benchmarks/gpu_peaks.py: the utilisation column of benchmarks/gpu_grpo.py's table."""

from __future__ import annotations

import math

from tests.benchmark_scripts import load_benchmark

gpu_peaks = load_benchmark("gpu_peaks")


def test_a_pcie_h100_is_not_read_as_the_sxm_part() -> None:
    assert gpu_peaks.bf16_peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_peaks.bf16_peak_tflops("NVIDIA H100 80GB HBM3") == 989.4


def test_utilisation_is_over_every_training_gpu_and_unknown_devices_get_none() -> None:
    one = gpu_peaks.utilisation_percent(197.88, "NVIDIA H200", 1)
    assert math.isclose(one, 20.0)
    assert math.isclose(gpu_peaks.utilisation_percent(197.88, "NVIDIA H200", 2), one / 2)
    assert math.isnan(gpu_peaks.utilisation_percent(100.0, "Some Future GPU", 1))
    assert math.isnan(gpu_peaks.utilisation_percent(100.0, None, 1))
