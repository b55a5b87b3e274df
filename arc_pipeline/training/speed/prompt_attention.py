"""The attention of passes over completions that share a prompt (arc_pipeline/training/speed/shared_prompt.py).

Such a pass attends to the prompt's keys and values and, causally, to its own: the causal mask aligned to the
bottom right of the (completions x prompt + completions) score matrix. When every completion is right padded
(TRL's layout) that mask is the whole story, since padding tokens come after every real one, and PyTorch's
``causal_lower_right`` on grouped-query heads runs it with FlashAttention on a GPU. transformers' ``sdpa``
attention function is replaced once (process-wide) by one that does so when a pass asks for it with the keyword
``shared_prompt_causal=True`` (it reaches every layer's attention, and a checkpointed layer's replay keeps it) and
is transformers' own otherwise. :func:`bottom_right_attention_holds` checks the kernel against an explicit mask
on the model's device and dtype before it is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SHARED_PROMPT_CAUSAL = "shared_prompt_causal"  # the keyword a pass gives the model to ask for the attention below


def use_shared_prompt_attention() -> None:
    """transformers' ``sdpa`` attention, plus the bottom-right causal attention of passes that ask for it."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    current = AttentionInterface._global_mapping["sdpa"]
    if getattr(current, "asks_for", None) == SHARED_PROMPT_CAUSAL:
        return
    AttentionInterface.register("sdpa", _with_shared_prompt_attention(sdpa_attention_forward))


def _with_shared_prompt_attention(transformers_sdpa: Callable[..., Any]) -> Callable[..., Any]:
    def attention(
        module: Any,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        dropout: float = 0.0,
        scaling: float | None = None,
        **kwargs: Any,
    ) -> tuple[Any, None]:
        if not kwargs.pop(SHARED_PROMPT_CAUSAL, False):
            return transformers_sdpa(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
        return bottom_right_causal_attention(module, query, key, value, dropout, scaling), None

    attention.asks_for = SHARED_PROMPT_CAUSAL  # type: ignore[attr-defined]
    return attention


def bottom_right_causal_attention(
    module: Any, query: Any, key: Any, value: Any, dropout: float, scaling: float | None
) -> Any:
    """Queries (the last ``query.shape[2]`` positions) attend to every key up to their own position; output in
    transformers' layout (batch, tokens, heads, head size). Grouped-query heads go to the kernel as they are
    when FlashAttention takes them, and are repeated for the memory-efficient kernel otherwise."""
    import torch
    from torch.nn.attention.bias import causal_lower_right
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = int(getattr(module, "num_key_value_groups", 1))
    grouped = groups > 1
    if grouped and not _flash_takes_grouped_heads(query, key, value):
        key, value, grouped = repeat_kv(key, groups), repeat_kv(value, groups), False
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=causal_lower_right(query.shape[2], key.shape[2]),
        dropout_p=dropout if module.training else 0.0,
        scale=scaling,
        enable_gqa=grouped,
    )
    return output.transpose(1, 2).contiguous()


def _flash_takes_grouped_heads(query: Any, key: Any, value: Any) -> bool:
    if not query.is_cuda:
        return False
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    return bool(can_use_flash_attention(SDPAParams(query, key, value, None, 0.0, False, True)))


def bottom_right_attention_holds(device: Any, dtype: Any, head_dim: int, groups: int) -> bool:
    """Whether :func:`bottom_right_causal_attention` on this device and dtype (whichever kernel PyTorch picks)
    equals attention with an explicit bottom-right causal mask, on a small random case (a few milliseconds)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    heads, queries, keys = 2 * groups, 5, 9

    def sample(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator).to(device=device, dtype=dtype)

    query, key, value = sample(2, heads, queries, head_dim), sample(2, 2, keys, head_dim), sample(2, 2, keys, head_dim)
    module = type("Attention", (), {"num_key_value_groups": groups, "training": False})()
    with torch.no_grad():
        output = bottom_right_causal_attention(module, query, key, value, 0.0, None).float()
        mask = torch.ones(queries, keys, dtype=torch.bool, device=device).tril(diagonal=keys - queries)
        expected = torch.nn.functional.scaled_dot_product_attention(
            query.float(),
            key.float().repeat_interleave(groups, dim=1),
            value.float().repeat_interleave(groups, dim=1),
            attn_mask=mask,
        ).transpose(1, 2)
    tolerance = 1e-4 if dtype == torch.float32 else 3e-2
    return bool(torch.allclose(output, expected, atol=tolerance, rtol=tolerance))


def attention_of(model: Any) -> str | None:
    """The model's attention implementation (through a data-parallel wrapper)."""
    config = getattr(getattr(model, "module", model), "config", None)
    return getattr(config, "_attn_implementation", None)


def right_padded(mask: Any) -> bool:
    """Whether every row of a (rows x tokens) mask is ones, then zeros."""
    import torch

    lengths = mask.sum(dim=1, keepdim=True)
    expected = torch.arange(mask.shape[1], device=mask.device).unsqueeze(0) < lengths
    return bool(torch.equal(mask.bool(), expected))
