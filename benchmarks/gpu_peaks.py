"""Model FLOP utilisation: a benchmark's model TFLOP/s over the GPUs' dense bf16 peak.

The peaks are the vendors' dense (not 2:4-sparse) bf16 tensor-core figures; a device whose name matches none
gets no utilisation rather than a guessed one.
"""

from __future__ import annotations

# (substring of torch.cuda.get_device_name(), dense bf16 peak in TFLOP/s); the first match wins, so the more
# specific names come first
BF16_DENSE_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM (H100 80GB HBM3)
    ("H200", 989.4),
    ("A100", 312.0),
)


def bf16_peak_tflops(device_name: str | None) -> float | None:
    """The dense bf16 peak of one ``device_name`` GPU in TFLOP/s, or None for a device not listed."""
    if not device_name:
        return None
    for fragment, peak in BF16_DENSE_PEAK_TFLOPS:
        if fragment in device_name:
            return peak
    return None


def utilisation_percent(tflops: float, device_name: str | None, gpus: int) -> float:
    """``tflops`` as a share (%) of ``gpus`` GPUs' peak; NaN when the device's peak is not known."""
    peak = bf16_peak_tflops(device_name)
    if peak is None or gpus < 1:
        return float("nan")
    return 100.0 * tflops / (peak * gpus)
