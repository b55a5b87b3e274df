"""Deterministic seeds derived from the config seed and a key (task id, turn, round).

Every random choice of a prediction is a function of ``(seed, task_id, turn, round)`` only, never of
the position of the task in a file or of the other tasks in a shard: a shard reproduces on its own.
"""

from __future__ import annotations

import hashlib

import numpy as np

# vLLM gives the i-th of a request's n samples the seed ``request_seed + i``; seeds stay below 2**62
# so that sum fits the int64 ``seed`` column (and torch's generator) with room to spare.
SEED_BITS = 62


def derive_seed(seed: int, *keys: object) -> int:
    """A 62-bit seed from the base ``seed`` and ``keys`` (hashed, so nearby keys give unrelated seeds)."""
    text = "\x1f".join([str(int(seed)), *map(str, keys)])
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


def round_rng(seed: int, task_id: str, turn: int, round_index: int) -> np.random.Generator:
    """The generator for one round's augmentation, train order and test input."""
    return np.random.default_rng(derive_seed(seed, "round", task_id, turn, round_index))


def request_key(task_id: str, turn: int, round_index: int) -> str:
    """The key of one round's sampling request (and the prefix of its prediction ids)."""
    return f"{task_id}/t{turn}/r{round_index}"


def prediction_id(task_id: str, turn: int, round_index: int, sample_index: int) -> str:
    return f"{request_key(task_id, turn, round_index)}/s{sample_index}"
