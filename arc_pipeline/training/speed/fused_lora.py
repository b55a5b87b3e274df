"""``train.fused_lora``: each LoRA projection of the policy as one autograd function, base and branch together.

The preset's step under torch.profiler (benchmarks/README.md, 2026-11-29) spends more device time in the rank-1
LoRA branches than in the 8B projections they sit on. PEFT runs a branch as two ``nn.Linear`` calls on the input
cast to the adapter's float32 (under autocast: a float32 copy of the activations, then a bfloat16 copy of that),
a scale and an add over the projection's output; with one rank column, the products run as matrix-matrix kernels
whose output has one column, which a GPU spreads over a handful of thread blocks. Here the frozen projection and
its branch are one function: the input stays in the activations' dtype; the down-projection is a matrix-vector
product when the rank is 1; the up-projection, its scale and the add are one ``addr_``/``addmm_`` into the
projection's output; the backward writes the input's gradient once (the branch's part added in place) and the
adapter's gradients as matrix-vector products. The arithmetic is PEFT's, rounded in other places: the adapter
weights are the same parameters (names and dtype), so checkpoints, the adapter file and the weight sync to vLLM
see the PEFT model unchanged. A layer the function does not cover (dropout, DoRA and other variants, a bias on
the branch, a trainable base weight) keeps PEFT's forward; so does a call with the adapter disabled or merged.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from arc_pipeline.errors import PipelineError

log = logging.getLogger(__name__)


def _times_thin(matrix: Any, thin: Any) -> Any:
    """``matrix @ thin`` for a ``thin`` of r columns (the LoRA rank): a matrix-vector product when r is 1."""
    return torch.mv(matrix, thin[:, 0]).unsqueeze(1) if thin.shape[1] == 1 else torch.mm(matrix, thin)


def _add_product(out: Any, left: Any, right: Any, alpha: float = 1.0) -> None:
    """``out += alpha * left @ right`` in place, for ``left`` of r columns: an outer product when r is 1."""
    if left.shape[1] == 1:
        out.addr_(left[:, 0], right[0], alpha=alpha)
    else:
        out.addmm_(left, right, alpha=alpha)


class _ProjectionWithBranch(torch.autograd.Function):
    """``x @ weight.T + bias + scaling * (x @ lora_a.T) @ lora_b.T`` on 2-D ``x`` already in the compute dtype;
    gradients for ``x``, ``lora_a`` and ``lora_b`` (the base weight and bias are frozen)."""

    @staticmethod
    def forward(ctx: Any, x: Any, weight: Any, bias: Any, lora_a: Any, lora_b: Any, scaling: float) -> Any:
        a, b = lora_a.to(x.dtype), lora_b.to(x.dtype)
        out = torch.mm(x, weight.t()) if bias is None else torch.addmm(bias, x, weight.t())
        down = _times_thin(x, a.t())  # (tokens, rank)
        _add_product(out, down, b.t(), alpha=scaling)
        ctx.save_for_backward(x, weight, a, b, down)
        ctx.scaling = scaling
        ctx.parameter_dtypes = (lora_a.dtype, lora_b.dtype)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Any) -> tuple[Any, ...]:
        x, weight, a, b, down = ctx.saved_tensors
        grad_out = grad_out.to(x.dtype)
        grad_down = _times_thin(grad_out, b).mul_(ctx.scaling)  # what reaches the down-projection's output
        grad_x = grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(grad_out, weight)
            _add_product(grad_x, grad_down, a)
        if ctx.needs_input_grad[3]:
            grad_a = _times_thin(x.t(), grad_down).t().to(ctx.parameter_dtypes[0])
        if ctx.needs_input_grad[4]:
            grad_b = _times_thin(grad_out.t(), down).mul_(ctx.scaling).to(ctx.parameter_dtypes[1])
        return grad_x, None, None, grad_a, grad_b, None


def _plain_adapter(layer: Any, name: str) -> bool:
    """Whether adapter ``name`` of PEFT layer ``layer`` is a plain LoRA branch the function computes."""
    base = layer.get_base_layer()
    return (
        name in layer.lora_A
        and isinstance(base, torch.nn.Linear)
        and not base.weight.requires_grad
        and (base.bias is None or not base.bias.requires_grad)
        and isinstance(layer.lora_dropout[name], torch.nn.Identity)
        and name not in getattr(layer, "lora_variant", {})
        and not getattr(layer, "use_dora", {}).get(name, False)
        and layer.lora_A[name].bias is None
        and layer.lora_B[name].bias is None
        and not getattr(layer, "fan_in_fan_out", False)
    )


def _compute_dtype(x: Any) -> Any:
    """The dtype autocast would run the projection in (the input's own outside autocast)."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def _in_dtype(tensor: Any, dtype: Any) -> Any:
    """``tensor.to(dtype)`` without the call when it already is (``to`` returns it then, after a dispatch)."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def _fused_forward(layer: Any, peft_forward: Any, function: Any) -> Any:
    # Once per layer, not per call: the training pass is host-bound (benchmarks/README.md, twenty-ninth lease) and a
    # step makes about 4,500 projection calls; a layer's base and its adapters' kinds do not change in training, so
    # which adapters the function computes is decided at an adapter's first call
    base = layer.get_base_layer()
    plain: dict[str, bool] = {}

    def forward(x: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or layer.disable_adapters or layer.merged:
            return peft_forward(x, *args, **kwargs)
        active = layer.active_adapters
        if len(active) != 1:
            return peft_forward(x, *args, **kwargs)
        name = active[0]
        computed = plain.get(name)
        if computed is None:
            computed = plain[name] = _plain_adapter(layer, name)
        if not computed:
            return peft_forward(x, *args, **kwargs)
        dtype = _compute_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            out = function.apply(
                _in_dtype(x.reshape(-1, x.shape[-1]), dtype),
                _in_dtype(base.weight, dtype),
                None if base.bias is None else _in_dtype(base.bias, dtype),
                layer.lora_A[name].weight,
                layer.lora_B[name].weight,
                float(layer.scaling[name]),
            )
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward


def fuse_lora_projections(model: Any, kernels: str = "torch") -> int:
    """Route every plain LoRA projection of ``model`` (after the LoRA went on) through the fused function; the
    number of projections fused. A model with none is an error, not a silent no-op. ``kernels``: ``torch`` (this
    module's function) or ``triton`` (rank 1 only: arc_pipeline/training/speed/rank1_kernels.py)."""
    from peft.tuners.lora.layer import Linear as LoraLinear

    function: Any = _ProjectionWithBranch
    if kernels == "triton":
        from arc_pipeline.training.speed.rank1_kernels import ProjectionWithRank1Branch

        function = ProjectionWithRank1Branch
    fused = 0
    for module in model.modules():
        if isinstance(module, LoraLinear) and any(_plain_adapter(module, name) for name in module.lora_A):
            ranks = {module.lora_A[name].weight.shape[0] for name in module.lora_A} if kernels == "triton" else {1}
            if ranks != {1}:
                raise PipelineError(f"train: fused_lora_kernels triton computes rank-1 branches; LoRA rank {ranks}")
            module.forward = _fused_forward(module, module.forward, function)
            fused += 1
    if not fused:
        raise PipelineError(
            f"train: fused_lora: no plain LoRA projection in {type(model).__name__} (lora_dropout must be 0; "
            "DoRA and LoRA biases keep PEFT's forward)"
        )
    log.info("fused_lora: %d LoRA projections fused with their base projection (%s kernels)", fused, kernels)
    return fused
