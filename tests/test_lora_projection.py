"""benchmarks/lora_projection.py runs both ways on this CPU and tabulates them: each projection's PEFT and fused
times with their ratio, the layer's sum, and the step estimate scaled by layers and chunks."""

from __future__ import annotations

import re

from tests.benchmark_scripts import load_benchmark


def test_the_benchmark_times_both_ways_and_scales_the_layer_to_a_step():
    bench = load_benchmark("lora_projection")
    timings = bench.measure(tokens=4, rank=1, repeats=1, device="cpu", projections=(("a", 16, 8), ("b", 8, 16)))
    assert [(t.projection, t.way) for t in timings] == [("a", "peft"), ("a", "fused"), ("b", "peft"), ("b", "fused")]
    assert all(t.milliseconds > 0 and t.peak_mib is None for t in timings)

    text = bench.table(timings, tokens=4, step_tokens=40)
    layer = sum(t.milliseconds for t in timings if t.way == "peft")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    assert set(rows) >= {"a", "b", "one layer", f"estimate: {bench.LAYERS} layers x 10.0 chunks (s)"}
    assert f"| one layer | {layer:.3f} |" in text
    estimate = re.search(r"chunks \(s\) \| ([0-9.]+) \|", text)
    assert estimate and float(estimate.group(1)) == round(layer * bench.LAYERS * 10 / 1000, 2)
