"""Helpers shared by the training tests (imported by conftest and test modules)."""

from __future__ import annotations

import numpy as np

from arc_pipeline.domain.tasks import Pair, Task

REFINE_TEXT = "I will recolor.\n```python\ndef transform(input_grid):\n    return input_grid\n```"


def grid(rows):
    return np.array(rows, dtype=np.int8)


def recolor_task(task_id: str = "recolor") -> Task:
    """Blue cells become red. The identity program gets only the second train pair right."""
    return Task(
        task_id,
        train=(
            Pair(grid([[1, 0], [0, 0]]), grid([[2, 0], [0, 0]])),
            Pair(grid([[0, 3], [0, 0]]), grid([[0, 3], [0, 0]])),
        ),
        test=(Pair(grid([[5, 1], [0, 0]]), grid([[5, 2], [0, 0]])),),
        source="test",
    )


def refinement_rows(tokenizer, n_rows: int) -> list[dict]:
    """``n_rows`` copies of the refinement example of the recolor task (identity previous answer)."""
    from arc_pipeline.refinement import refinement_example

    task = recolor_task()
    row = {
        "prediction_id": "recolor/t1/r0/s0",
        "task_id": task.task_id,
        "hflip": False,
        "rot90_k": 0,
        "color_map": list(range(10)),
        "test_index": 0,
        "text": REFINE_TEXT,
        "train_outputs": [g.tolist() for g in task.train_inputs],
        "train_correct_grids": 0.5,
        "train_pixel_score": 0.875,
    }
    example = refinement_example(task, row, tokenizer)
    return [dict(example, prediction_id=f"recolor/{i}") for i in range(n_rows)]
