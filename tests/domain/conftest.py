"""Fixtures for the domain tests: a fixed small task and the tiny model's tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from arc_pipeline.domain.tasks import Pair, Task


def grid(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int8)


@pytest.fixture
def small_task() -> Task:
    """Three train pairs of different shapes and two test inputs."""
    return Task(
        task_id="fixed0",
        train=(
            Pair(grid([[0, 1], [2, 3]]), grid([[1, 0], [3, 2]])),
            Pair(grid([[4, 5, 6]]), grid([[6, 5, 4]])),
            Pair(grid([[1, 1], [1, 1]]), grid([[2, 2], [2, 2]])),
        ),
        test=(Pair(grid([[7], [8]]), grid([[8], [7]])), Pair(grid([[9, 0]]), grid([[0, 9]]))),
    )


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The tokenizer the model stage builds for the tiny model (Llama 3.1 tokens and chat template)."""
    from arc_pipeline.models.tokenizer import EXAMPLE_ANSWER, train_tokenizer

    corpus = [EXAMPLE_ANSWER, "Black Blue Red Green Yellow Gray Pink Orange Purple Brown\n" * 20]
    return train_tokenizer(corpus, vocab_size=600, max_length=16384)
