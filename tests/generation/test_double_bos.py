"""The inference's double-BOS switch (``inference.double_bos``), on the tiny model's Llama 3 tokenizer.

No engine: :func:`tokenize_rendered` is what ``Engine.tokenize`` sends to vLLM as token ids.
"""

from __future__ import annotations

import pytest
from inference_helpers import build_untrained_tiny_model, small_tasks, write_tasks

from arc_pipeline.domain.prompts import first_turn_messages, render_first_turn
from arc_pipeline.generation.engine import EngineOptions, added_prompt_tokens, tokenize_rendered
from arc_pipeline.models.folder import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("double_bos")
    tasks = write_tasks(small_tasks(2), workdir / "tasks.parquet")
    return load_tokenizer(build_untrained_tiny_model(tasks, workdir / "model"))


def test_double_bos_prepends_a_second_begin_of_text(tokenizer):
    task = small_tasks(1)[0]
    prompt = render_first_turn(tokenizer, first_turn_messages(task, range(len(task.train)), 0))
    bos = tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    assert prompt.startswith("<|begin_of_text|>")

    [single] = tokenize_rendered(tokenizer, [prompt])
    [double] = tokenize_rendered(tokenizer, [prompt], double_bos=True)
    assert single[0] == bos and single[1] != bos  # the rendered BOS only
    assert double[:2] == [bos, bos]  # what vLLM made of the published run's text prompts
    assert double[1:] == single
    # the same ids vLLM's own text tokenization gives (the tokenizer's default adds BOS)
    assert double == tokenizer(prompt)["input_ids"]
    assert added_prompt_tokens(tokenizer, False) == 0 and added_prompt_tokens(tokenizer, True) == 1


def test_double_bos_is_off_by_default():
    assert EngineOptions().double_bos is False
    assert EngineOptions(double_bos=True).double_bos is True
