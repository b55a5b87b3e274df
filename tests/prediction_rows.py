"""Rows of the predictions table (arc_pipeline/schemas.py PREDICTIONS_SCHEMA) for tests: one first-turn
sample of a tiny model, un-augmented, with only what a test cares about given."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from arc_pipeline.schemas import PREDICTIONS_SCHEMA

IDENTITY_AUGMENTATION = {"hflip": False, "rot90_k": 0, "color_map": list(range(10))}


def prediction_row(task_id: str, text: str, **fields: Any) -> dict[str, Any]:
    """A prediction of ``task_id`` answering ``text``; ``fields`` replace the defaults (any column)."""
    row: dict[str, Any] = {
        "prediction_id": None,  # from the task, turn, round and sample unless given
        "task_id": task_id,
        "turn": 1,
        "round": 0,
        "sample_index": 0,
        **IDENTITY_AUGMENTATION,
        "train_order": [0, 1],
        "test_index": 0,
        "parent_prediction_id": None,
        "prompt_hash": "0" * 16,
        "prompt_tokens": 10,
        "text": text,
        "completion_tokens": 5,
        "finish_reason": "stop",
        "model": "tiny",
        "adapter": None,
        "temperature": 1.0,
        "top_p": 0.95,
        "max_tokens": 1024,
        "seed": 0,
    }
    row.update(fields)
    if row["prediction_id"] is None:
        row["prediction_id"] = f"{task_id}/t{row['turn']}/r{row['round']}/s{row['sample_index']}"
    return row


def predictions_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=PREDICTIONS_SCHEMA)
