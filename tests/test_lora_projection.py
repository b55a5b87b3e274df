"""benchmarks/lora_projection.py runs every way on this CPU and tabulates them: each projection's times with
their ratios to PEFT's, the layer's sums, and the step estimate scaled by layers and chunks; the function's
products computed by reduction (one of the ways) give the matrix product."""

from __future__ import annotations

import torch

from tests.benchmark_scripts import load_benchmark

BENCH = load_benchmark("lora_projection")


def test_the_benchmark_times_every_way_and_scales_the_layer_to_a_step():
    timings = BENCH.measure(tokens=4, rank=1, repeats=1, device="cpu", projections=(("a", 16, 8), ("b", 8, 16)))
    assert [(t.projection, t.way) for t in timings] == [(p, way) for p in "ab" for way in BENCH.WAYS]
    assert all(t.milliseconds > 0 and t.peak_mib is None for t in timings)

    rows = {
        line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")
        for line in BENCH.table(timings, tokens=4, step_tokens=40).splitlines()
    }
    assert {"a", "b", "one layer", f"estimate: {BENCH.LAYERS} layers x 10.0 chunks (s)"} <= set(rows)
    for index, way in enumerate(BENCH.WAYS, start=1):
        layer = sum(t.milliseconds for t in timings if t.way == way)
        assert rows["one layer"][index] == f"{layer:.3f}"
        estimate = rows[f"estimate: {BENCH.LAYERS} layers x 10.0 chunks (s)"][index]
        assert estimate == f"{layer * BENCH.LAYERS * 10 / 1000:.3f}"


def test_products_by_reduction_are_the_matrix_products():
    matrix, thin, column = torch.randn(5, 7), torch.randn(7, 2), torch.randn(5, 1)
    torch.testing.assert_close(BENCH.times_thin_by_reduction(matrix, thin), matrix @ thin)
    torch.testing.assert_close(BENCH.times_thin_by_reduction(matrix.t(), column), matrix.t() @ column)


def test_every_fused_way_computes_the_same_gradients():
    """The ways differ in kernels only: each fused way's output and gradients (input, lora_A, lora_B) are PEFT's."""
    torch.manual_seed(0)
    model = BENCH.lora_projection(24, 40, rank=1, device="cpu")
    inputs, grad_out = torch.randn(6, 24, dtype=torch.bfloat16), torch.randn(6, 40, dtype=torch.bfloat16)

    def gradients(way: str) -> list[torch.Tensor]:
        model.zero_grad()
        x = inputs.detach().requires_grad_(True)
        with BENCH.swapped_helpers(way), torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        out.backward(grad_out)
        lora = [p.grad.clone() for n, p in model.named_parameters() if "lora_" in n]
        return [out.detach().float(), x.grad.float(), *lora]

    peft = gradients("peft")
    BENCH.fuse_lora_projections(model)
    for way in ("fused", "fused-mm", "fused-reduce"):
        for theirs, ours in zip(peft, gradients(way), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)
    with BENCH.swapped_helpers("fused-mm"):
        assert BENCH.fused_lora._add_product is BENCH.add_product_by_mm
    assert BENCH.fused_lora._add_product is not BENCH.add_product_by_mm  # restored after the block


def test_the_profile_names_each_ways_operators():
    """PEFT's way runs its branch as linear layers; the fused way as matrix-vector products and an outer product;
    fused-mm as matrix-matrix products only."""
    tables = BENCH.profile_layer(tokens=4, rank=1, repeats=1, device="cpu", projections=(("a", 16, 8),))
    assert set(tables) == {"peft", "fused", "fused-mm"}
    assert "aten::linear" in tables["peft"] and "aten::mv" not in tables["peft"]
    assert "aten::mv" in tables["fused"] and "aten::addr_" in tables["fused"]
    assert "aten::mv" not in tables["fused-mm"] and "aten::addr_" not in tables["fused-mm"]
    assert "aten::addmm_" in tables["fused-mm"]


def test_a_gpu_adds_the_triton_way():
    assert BENCH.ways_on("cpu") == BENCH.WAYS
    assert BENCH.ways_on("cuda") == ("peft", "fused", "fused-mm", "fused-reduce", "triton", "base")
    assert BENCH.ways_on("cuda", BENCH.PROFILED) == ("peft", "fused", "fused-mm", "triton")


def test_a_way_that_fails_is_left_out_and_the_others_are_timed(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel did not compile")

    monkeypatch.setitem(BENCH.SWAPS, "fused-mm", {"_times_thin": broken})
    timings = BENCH.measure(tokens=4, rank=1, repeats=1, device="cpu", projections=(("a", 16, 8),))
    assert [t.way for t in timings] == [way for way in BENCH.WAYS if way != "fused-mm"]
    header = BENCH.table(timings, tokens=4, step_tokens=40).splitlines()[0]
    assert "fused-mm" not in header and "fused-reduce (ms)" in header
    assert BENCH.fused_lora._times_thin is not broken  # the helper is restored after the failure
    tables = BENCH.profile_layer(tokens=4, rank=1, repeats=1, device="cpu", projections=(("a", 16, 8),))
    assert set(tables) == {"peft", "fused"}


def test_the_host_device_table_says_what_bounds_each_way():
    """A layer runs at the pace of the slower side: the host's issuing or the GPU's running."""
    results = [BENCH.HostDevice("peft", host_ms=7.0, device_ms=4.0), BENCH.HostDevice("base", 1.0, 3.0)]
    rows = {
        line.strip("| ").split(" | ")[0]: line.strip("| ").split(" | ")
        for line in BENCH.host_device_table(results, tokens=4, step_tokens=40).splitlines()[2:]
    }
    assert rows["peft"][1:4] == ["7.000", "4.000", "host"]
    assert rows["base"][1:4] == ["1.000", "3.000", "device"]
    assert rows["peft"][4] == f"{7.0 * BENCH.LAYERS * 10 / 1000:.3f}"
    assert rows["base"][4] == f"{3.0 * BENCH.LAYERS * 10 / 1000:.3f}"
