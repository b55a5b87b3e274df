"""How close two float32 computations of one quantity must be when they differ only in the order of their sums.

The equality tests of the training code (shared prompt forward, chunked backward, data parallel) compare a
gradient, a loss or log-probs computed two ways that are equal in exact arithmetic. In float32 they differ by
rounding, and how much depends on the CPU: an AVX-512 kernel sums 16 lanes at a time, an AVX2 one 8, oneDNN and
MKL block their matrix products by the vector width. A tolerance read off one machine's error fails on the next.

The bound used here comes from the arithmetic instead. Each float32 operation rounds to within the unit roundoff
u = 2**-24. Summing n terms in two different orders gives results that differ by at most 2 * n * u * sum(|x|)
(every rounding error pointing the same way); rounding errors are independent in practice and their sum grows
like sqrt(n) instead (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., sections 2.8 and 4.2).
So a compared element gets ``SIGMAS * sqrt(n) * u`` of the scale of the compared tensor (its largest magnitude),
where n is the number of terms in the longest chain of sums behind one element: the tokens a gradient sums over
times the widest dimension a matrix product contracts. ``SIGMAS`` (4) covers the tail over thousands of compared
elements and the few layers the error passes through (n, the product of the two, already overstates a chain that
is a sum of sums); the bound stays orders of magnitude below what a real bug
does (a chunk weighted wrongly, a missing gradient term: errors of 1-100% of the scale).
"""

from __future__ import annotations

import math
from typing import Any

import torch

FLOAT32_UNIT_ROUNDOFF = 2.0**-24
SIGMAS = 4.0


def reordered_sum_tolerance(terms: int) -> float:
    """Relative tolerance between two float32 evaluations of a sum of ``terms`` terms in different orders."""
    if terms < 1:
        raise ValueError(f"terms must be positive, got {terms}")
    return SIGMAS * math.sqrt(terms) * FLOAT32_UNIT_ROUNDOFF


def assert_reordered_close(
    actual: torch.Tensor, expected: torch.Tensor, terms: int, what: str = "", rounding: float = 0.0
) -> None:
    """``actual`` equals ``expected`` up to float32 summation order over ``terms`` terms: every element within
    the tolerance of the largest magnitude of ``expected`` (plus as much of its own magnitude), plus
    ``rounding``, an absolute error the caller derived for a rounding outside the sums."""
    tolerance = reordered_sum_tolerance(terms)
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(
        actual,
        expected,
        rtol=tolerance,
        atol=tolerance * scale + rounding,
        msg=lambda text: f"{what}: {text} (float32 reordering tolerance {tolerance:.2e} over {terms} terms)",
    )


def model_sum_terms(config: Any, tokens: int) -> int:
    """The longest chain of sums behind one gradient element of a transformer's weights: the ``tokens`` of the
    batch times the widest dimension its matrix products contract (hidden or MLP width, or the vocabulary of
    the log-softmax). ``config``: the model's config (``model.config``, or its ``config.json`` read as attributes)."""
    widest = max(config.hidden_size, getattr(config, "intermediate_size", 0), config.vocab_size)
    return tokens * widest
