"""``train.fused_lora_kernels: triton``: a rank-1 LoRA branch in three small Triton kernels.

With ``train.fused_lora`` each projection and its LoRA branch are one autograd function
(arc_pipeline/training/speed/fused_lora.py); at rank 1 its branch is four thin products: the input times ``a`` (one
number per token), that column's outer product with ``b`` added to the output, and in the backward the gradient
times ``b``, its outer product with ``a`` added to the input's gradient, and two sums over tokens for the
adapter's gradients. Each reads a full activation matrix and does almost no arithmetic, so its cost is how well
its kernel streams memory; PyTorch runs them as BLAS matrix-vector calls and an elementwise outer product, which
measured no faster than PEFT's linear layers (benchmarks/README.md). Here each is a Triton kernel written for
that shape:

- ``_row_dot``: ``out[t] = scale * sum_k m[t, k] * v[k]`` (the input times ``a``, the gradient times ``b``);
- ``_add_outer``: ``out[t, n] += scale * u[t] * v[n]`` in place (the branch into the output, into the input's
  gradient);
- ``_col_dot``: ``out[k] += sum_t m[t, k] * u[t]``, tokens split over programs and summed with atomic adds
  (the adapter's gradients; in whatever order the programs finish, so equal run to run only up to float32
  rounding).

Row offsets are 64-bit: a matrix of more than 2**31 elements (an unchunked full-length step) stays addressable.

Products accumulate in float32; the per-token columns stay float32 between the kernels (the torch function
rounds them to the activations' dtype), so the results are PEFT's up to bfloat16 rounding. The frozen
projection itself stays PyTorch's matrix product. GPU only in training; the tests run the kernels on the CPU
in Triton's interpreter (``TRITON_INTERPRET=1``, set before this module is imported).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

# tile sizes: rows of tokens x columns of features per program (no autotuning: fixed shapes, first-call compile)
ROW_DOT_BLOCKS = (8, 512)
ADD_OUTER_BLOCKS = (64, 128)
COL_DOT_BLOCKS = (32, 128)
COL_DOT_ROWS_PER_PROGRAM = 256


@triton.jit
def _row_dot(m_ptr, v_ptr, out_ptr, rows, cols, stride_m, scale, block_r: tl.constexpr, block_c: tl.constexpr):
    r = tl.program_id(0) * block_r + tl.arange(0, block_r)
    acc = tl.zeros((block_r,), dtype=tl.float32)
    for start in range(0, cols, block_c):
        c = start + tl.arange(0, block_c)
        inside = (r[:, None] < rows) & (c[None, :] < cols)
        tile = tl.load(m_ptr + r.to(tl.int64)[:, None] * stride_m + c[None, :], mask=inside, other=0.0)
        v = tl.load(v_ptr + c, mask=c < cols, other=0.0)
        acc += tl.sum(tile.to(tl.float32) * v.to(tl.float32)[None, :], axis=1)
    tl.store(out_ptr + r, acc * scale, mask=r < rows)


@triton.jit
def _add_outer(out_ptr, u_ptr, v_ptr, rows, cols, stride_o, scale, block_r: tl.constexpr, block_c: tl.constexpr):
    r = tl.program_id(0) * block_r + tl.arange(0, block_r)
    c = tl.program_id(1) * block_c + tl.arange(0, block_c)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    pointers = out_ptr + r.to(tl.int64)[:, None] * stride_o + c[None, :]
    u = tl.load(u_ptr + r, mask=r < rows, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + c, mask=c < cols, other=0.0).to(tl.float32)
    total = tl.load(pointers, mask=mask, other=0.0).to(tl.float32) + scale * u[:, None] * v[None, :]
    tl.store(pointers, total.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _col_dot(
    m_ptr, u_ptr, out_ptr, rows, cols, stride_m, rows_per_program, block_r: tl.constexpr, block_c: tl.constexpr
):
    c = tl.program_id(0) * block_c + tl.arange(0, block_c)
    first = tl.program_id(1) * rows_per_program
    acc = tl.zeros((block_c,), dtype=tl.float32)
    for start in range(first, first + rows_per_program, block_r):
        r = start + tl.arange(0, block_r)
        inside = (r[:, None] < rows) & (c[None, :] < cols)
        tile = tl.load(m_ptr + r.to(tl.int64)[:, None] * stride_m + c[None, :], mask=inside, other=0.0)
        u = tl.load(u_ptr + r, mask=r < rows, other=0.0)
        acc += tl.sum(tile.to(tl.float32) * u.to(tl.float32)[:, None], axis=0)
    tl.atomic_add(out_ptr + c, acc, mask=c < cols)


def row_dot(matrix: Any, vector: Any, scale: float = 1.0) -> Any:
    """``scale * matrix @ vector`` in float32, one number per row (``matrix``: rows x columns, unit column
    stride)."""
    rows, cols = matrix.shape
    out = torch.empty(rows, dtype=torch.float32, device=matrix.device)
    block_r, block_c = ROW_DOT_BLOCKS
    _row_dot[(triton.cdiv(rows, block_r),)](
        matrix, vector, out, rows, cols, matrix.stride(0), scale, block_r=block_r, block_c=block_c
    )
    return out


def add_outer_(out: Any, column: Any, row: Any, scale: float = 1.0) -> None:
    """``out += scale * column ⊗ row`` in place, summed in float32 and stored in ``out``'s dtype."""
    rows, cols = out.shape
    block_r, block_c = ADD_OUTER_BLOCKS
    grid = (triton.cdiv(rows, block_r), triton.cdiv(cols, block_c))
    _add_outer[grid](out, column, row, rows, cols, out.stride(0), scale, block_r=block_r, block_c=block_c)


def col_dot(matrix: Any, column: Any) -> Any:
    """``matrix.T @ column`` in float32, one number per column of ``matrix``."""
    rows, cols = matrix.shape
    out = torch.zeros(cols, dtype=torch.float32, device=matrix.device)
    block_r, block_c = COL_DOT_BLOCKS
    grid = (triton.cdiv(cols, block_c), triton.cdiv(rows, COL_DOT_ROWS_PER_PROGRAM))
    _col_dot[grid](
        matrix, column, out, rows, cols, matrix.stride(0), COL_DOT_ROWS_PER_PROGRAM, block_r=block_r, block_c=block_c
    )
    return out


class ProjectionWithRank1Branch(torch.autograd.Function):
    """``x @ weight.T + bias + scaling * (x @ lora_a.T) @ lora_b.T`` for a rank-1 adapter (``lora_a``: 1 x in,
    ``lora_b``: out x 1) on 2-D ``x`` in the compute dtype; gradients for ``x``, ``lora_a`` and ``lora_b``."""

    @staticmethod
    def forward(ctx: Any, x: Any, weight: Any, bias: Any, lora_a: Any, lora_b: Any, scaling: float) -> Any:
        x = x.contiguous()
        a, b = lora_a.reshape(-1), lora_b.reshape(-1)
        out = torch.mm(x, weight.t()) if bias is None else torch.addmm(bias, x, weight.t())
        down = row_dot(x, a)  # float32, one per token
        add_outer_(out, down, b, scaling)
        ctx.save_for_backward(x, weight, a, b, down)
        ctx.scaling = scaling
        ctx.parameter_shapes = ((lora_a.shape, lora_a.dtype), (lora_b.shape, lora_b.dtype))
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> tuple[Any, ...]:
        x, weight, a, b, down = ctx.saved_tensors
        grad_out = grad_out.to(x.dtype).contiguous()
        grad_down = row_dot(grad_out, b, ctx.scaling)  # what reaches the down-projection's output, float32
        grad_x = grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(grad_out, weight)
            add_outer_(grad_x, grad_down, a)
        (a_shape, a_dtype), (b_shape, b_dtype) = ctx.parameter_shapes
        if ctx.needs_input_grad[3]:
            grad_a = col_dot(x, grad_down).reshape(a_shape).to(a_dtype)
        if ctx.needs_input_grad[4]:
            grad_b = col_dot(grad_out, down).mul_(ctx.scaling).reshape(b_shape).to(b_dtype)
        return grad_x, None, None, grad_a, grad_b, None
