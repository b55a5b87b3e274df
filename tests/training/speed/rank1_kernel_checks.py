"""The checks of tests/training/speed/test_rank1_kernels.py, run in a process of their own with
``TRITON_INTERPRET=1``: Triton reads that variable when it is first imported (its own library functions are
compiled then), so the test process, where other tests may have imported Triton, cannot switch to its
interpreter. ``python tests/training/speed/rank1_kernel_checks.py`` runs every check; an assertion stops it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    raise SystemExit("run with TRITON_INTERPRET=1 (Triton's interpreter on the CPU)")
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from arc_pipeline.training.speed import rank1_kernels as kernels
from arc_pipeline.training.speed.fused_lora import fuse_lora_projections
from tests.numerics import assert_reordered_close
from tests.training.speed.test_fused_lora import (
    TOKENS,
    WIDTH,
    assert_close_under_autocast,
    output_and_gradients,
    two_projections,
)


def each_kernel_computes_its_product() -> None:
    torch.manual_seed(0)
    rows, cols = 300, 45  # several programs of every kernel; neither a multiple of a tile
    matrix = torch.randn(rows, cols, dtype=torch.bfloat16)
    exact = matrix.double()
    column, row = torch.randn(rows), torch.randn(cols)

    # float32 sums against float64 ones: within the rounding of a float32 sum of that many terms
    assert_reordered_close(kernels.row_dot(matrix, row, 0.5), (0.5 * exact @ row.double()).float(), cols, "row_dot")
    # the token sum spans two programs (256 rows each) added atomically
    assert_reordered_close(kernels.col_dot(matrix, column), (exact.t() @ column.double()).float(), rows, "col_dot")

    out = torch.randn(rows, cols, dtype=torch.bfloat16)
    expected = (out.double() + 2.0 * column.double()[:, None] * row.double()[None, :]).to(torch.bfloat16)
    kernels.add_outer_(out, column, row, 2.0)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=0.01, atol=0.01)


def the_triton_projection_gives_peft_output_and_gradients() -> None:
    model = two_projections(1)
    inputs = torch.randn(2, TOKENS, WIDTH)
    expected = output_and_gradients(model, inputs)
    expected_bf16 = output_and_gradients(model, inputs, autocast=True)

    assert fuse_lora_projections(model, "triton") == 2
    out, grad_x, grads = output_and_gradients(model, inputs)
    terms = 2 * TOKENS * 2 * WIDTH
    assert_reordered_close(out, expected[0], terms, "output")
    assert_reordered_close(grad_x, expected[1], terms, "input gradient")
    assert grads.keys() == expected[2].keys() and len(grads) == 4
    for name, grad in grads.items():
        assert grad.dtype == torch.float32 and grad.shape == expected[2][name].shape
        assert_reordered_close(grad, expected[2][name], terms, name)

    # under bfloat16 autocast, within test_fused_lora's bounds: the same products rounded at other places
    assert_close_under_autocast(output_and_gradients(model, inputs, autocast=True), expected_bf16)


CHECKS = (each_kernel_computes_its_product, the_triton_projection_gives_peft_output_and_gradients)

if __name__ == "__main__":
    for check in CHECKS:
        check()
        print(f"passed: {check.__name__}")
