"""The prompts must match docs/prompts.md byte for byte: expected texts are literal."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from arc_pipeline.domain import prompts
from arc_pipeline.domain.prompts import (
    ASSISTANT_PREFIX,
    SYSTEM_PROMPT,
    first_turn_messages,
    prompt_hash,
    refinement_messages,
    render_first_turn,
    render_refinement,
)

EXPECTED_SYSTEM = (
    "You are a world-class puzzle solver with exceptional pattern recognition skills and expertise in Python "
    "programming. Your task is to analyze puzzles and provide Python solutions."
)

EXPECTED_PREFIX = (
    "Let's solve this puzzle using Python code with the common library functions. We'll first reason about the "
    "problem and then write the code to solve it. The `transform` function will take the input grid and return "
    "the output grid. Here is the Python code with the comments describing how to solve the problem:\n"
)

# Train order [1, 0, 2], test input 1.
EXPECTED_FIRST_USER = """\
Given input-output grid pairs as reference examples, carefully observe the patterns to predict the output grid \
for new test input. Each pair follows the same transformation rule. Grids are 2D arrays represented as strings, \
with cells (colors) separated by spaces and rows by newlines.
Here are the input and output grids for the reference examples:
Example 1
Input:
Yellow Gray Pink

Output:
Pink Gray Yellow

Example 2
Input:
Black Blue
Red Green

Output:
Blue Black
Green Red

Example 3
Input:
Blue Blue
Blue Blue

Output:
Red Red
Red Red


Here is the input grid for the test example:
Brown Black

Write a Python function `transform` that can convert any given input grid to its corresponding output grid \
based on the pattern observed in the reference examples."""

# Natural train order, test input 0: the first turn of a refinement.
EXPECTED_NATURAL_USER = """\
Given input-output grid pairs as reference examples, carefully observe the patterns to predict the output grid \
for new test input. Each pair follows the same transformation rule. Grids are 2D arrays represented as strings, \
with cells (colors) separated by spaces and rows by newlines.
Here are the input and output grids for the reference examples:
Example 1
Input:
Black Blue
Red Green

Output:
Blue Black
Green Red

Example 2
Input:
Yellow Gray Pink

Output:
Pink Gray Yellow

Example 3
Input:
Blue Blue
Blue Blue

Output:
Red Red
Red Red


Here is the input grid for the test example:
Orange
Purple

Write a Python function `transform` that can convert any given input grid to its corresponding output grid \
based on the pattern observed in the reference examples."""

PREVIOUS_TEXT = (
    "The rule mirrors rows.\n```python\nfrom common import *\n\n"
    "def transform(input_grid):\n    return input_grid\n```\n"
)

# Example 1: same shape, 3 of 4 cells; example 2: exact; example 3: (1, 3) against (2, 2) -> 2 / 6.
EXPECTED_REFINEMENT_USER = """\
Your first solution was not correct. These are the results from executing your code:
Example 1
Execution output:
Blue Black
Green Green

The output grid does not match the expected output grid.
The pixel similarity score is 75.0%.
The output grid shape is correct.

Example 2
Execution output:


The output grid matches the expected output grid.

Example 3
Execution output:
Red Red Red

The output grid does not match the expected output grid.
The pixel similarity score is 33.3%.
The expected output grid has shape (2, 2), but the generated output grid has shape (1, 3).


Write a revised Python function `transform` that addresses the issues in your previous attempt and correctly \
transforms the input grid to the output grid based on the patterns observed in the reference examples."""

PREVIOUS_OUTPUTS = [
    np.array([[1, 0], [3, 3]], dtype=np.int8),
    np.array([[6, 5, 4]], dtype=np.int8),
    np.array([[2, 2, 2]], dtype=np.int8),
]

# The tiny model's Llama 3.1 template: default system header, trimmed contents.
LLAMA31_SYSTEM_BLOCK = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + EXPECTED_SYSTEM + "<|eot_id|>"
)

# A Llama-3-style template that keeps contents as they are (no date header, no trimming).
PLAIN_LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


def test_constants_are_the_spec_texts():
    assert SYSTEM_PROMPT == EXPECTED_SYSTEM
    assert ASSISTANT_PREFIX == EXPECTED_PREFIX


def test_first_turn_messages(small_task):
    messages = first_turn_messages(small_task, [1, 0, 2], 1)
    assert messages == [
        {"role": "system", "content": EXPECTED_SYSTEM},
        {"role": "user", "content": EXPECTED_FIRST_USER},
        {"role": "assistant", "content": EXPECTED_PREFIX},
    ]


def test_first_turn_natural_order(small_task):
    assert first_turn_messages(small_task, range(3), 0)[1]["content"] == EXPECTED_NATURAL_USER


@pytest.mark.parametrize("order", [[0, 1], [0, 1, 1], [0, 1, 3]])
def test_first_turn_rejects_bad_train_order(small_task, order):
    with pytest.raises(ValueError, match="fixed0"):
        first_turn_messages(small_task, order, 0)


def test_first_turn_rejects_bad_test_index(small_task):
    with pytest.raises(ValueError, match="test_index 2"):
        first_turn_messages(small_task, [0, 1, 2], 2)


def test_refinement_messages(small_task):
    messages = refinement_messages(small_task, 0, PREVIOUS_TEXT, PREVIOUS_OUTPUTS)
    assert messages == [
        {"role": "system", "content": EXPECTED_SYSTEM},
        {"role": "user", "content": EXPECTED_NATURAL_USER},
        {"role": "assistant", "content": EXPECTED_PREFIX + PREVIOUS_TEXT},
        {"role": "user", "content": EXPECTED_REFINEMENT_USER},
    ]


def test_refinement_all_correct_and_rounding(small_task):
    """Every output right -> only match messages; 1 of 3 cells -> 33.3%, 2 of 3 -> 66.7%."""
    outputs = [pair.output for pair in small_task.train]
    user = refinement_messages(small_task, 0, "", outputs)[-1]["content"]
    assert user.count("Execution output:\n\n\nThe output grid matches the expected output grid.\n\n") == 3
    outputs[1] = np.array([[6, 0, 0]], dtype=np.int8)
    user = refinement_messages(small_task, 0, "", outputs)[-1]["content"]
    assert (
        "Execution output:\nPink Black Black\n\nThe output grid does not match the expected output grid.\n"
        "The pixel similarity score is 33.3%.\nThe output grid shape is correct.\n\n" in user
    )
    outputs[1] = np.array([[6, 5, 0]], dtype=np.int8)
    assert "The pixel similarity score is 66.7%." in refinement_messages(small_task, 0, "", outputs)[-1]["content"]


def test_refinement_zero_similarity_and_tall_shape(small_task):
    outputs = [pair.output for pair in small_task.train]
    outputs[0] = np.array([[9], [9], [9]], dtype=np.int8)
    user = refinement_messages(small_task, 0, "", outputs)[-1]["content"]
    assert (
        "Example 1\nExecution output:\nBrown\nBrown\nBrown\n\n"
        "The output grid does not match the expected output grid.\nThe pixel similarity score is 0.0%.\n"
        "The expected output grid has shape (2, 2), but the generated output grid has shape (3, 1).\n\n"
        "Example 2\n"
    ) in user


def test_refinement_rejects_missing_outputs(small_task):
    with pytest.raises(ValueError, match="train output 1 is missing"):
        refinement_messages(small_task, 0, "", [PREVIOUS_OUTPUTS[0], None, PREVIOUS_OUTPUTS[2]])
    with pytest.raises(ValueError, match="2 previous train outputs for 3 train pairs"):
        refinement_messages(small_task, 0, "", PREVIOUS_OUTPUTS[:2])


def test_render_first_turn_tiny_tokenizer(small_task, tiny_tokenizer):
    """Llama 3.1 trims contents, so the continued prefix loses its final newline (as with the real model)."""
    rendered = render_first_turn(tiny_tokenizer, first_turn_messages(small_task, [1, 0, 2], 1))
    assert rendered == (
        LLAMA31_SYSTEM_BLOCK
        + "<|start_header_id|>user<|end_header_id|>\n\n"
        + EXPECTED_FIRST_USER
        + "<|eot_id|>"
        + "<|start_header_id|>assistant<|end_header_id|>\n\n"
        + EXPECTED_PREFIX[:-1]
    )


def test_render_refinement_tiny_tokenizer(small_task, tiny_tokenizer):
    rendered = render_refinement(tiny_tokenizer, refinement_messages(small_task, 0, PREVIOUS_TEXT, PREVIOUS_OUTPUTS))
    assert rendered == (
        LLAMA31_SYSTEM_BLOCK
        + "<|start_header_id|>user<|end_header_id|>\n\n"
        + EXPECTED_NATURAL_USER
        + "<|eot_id|>"
        + "<|start_header_id|>assistant<|end_header_id|>\n\n"
        + EXPECTED_PREFIX
        + PREVIOUS_TEXT.rstrip("\n")
        + "<|eot_id|>"
        + "<|start_header_id|>user<|end_header_id|>\n\n"
        + EXPECTED_REFINEMENT_USER
        + "<|eot_id|>"
        + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


@pytest.fixture
def plain_tokenizer(tiny_tokenizer):
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = PLAIN_LLAMA3_TEMPLATE
    return tokenizer


def test_render_with_untrimmed_llama3_template(small_task, plain_tokenizer):
    """A template that keeps whitespace keeps the prefix's newline; no end-of-turn token follows it."""
    first = render_first_turn(plain_tokenizer, first_turn_messages(small_task, [1, 0, 2], 1))
    assert first == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        + EXPECTED_SYSTEM
        + "<|eot_id|>"
        + "<|start_header_id|>user<|end_header_id|>\n\n"
        + EXPECTED_FIRST_USER
        + "<|eot_id|>"
        + "<|start_header_id|>assistant<|end_header_id|>\n\n"
        + EXPECTED_PREFIX
    )
    second = render_refinement(plain_tokenizer, refinement_messages(small_task, 0, PREVIOUS_TEXT, PREVIOUS_OUTPUTS))
    assert second.endswith(
        "<|start_header_id|>assistant<|end_header_id|>\n\n" + EXPECTED_PREFIX + PREVIOUS_TEXT + "<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n" + EXPECTED_REFINEMENT_USER + "<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_rendered_prompt_round_trips_through_the_tokenizer(small_task, tiny_tokenizer):
    rendered = render_first_turn(tiny_tokenizer, first_turn_messages(small_task, [0, 1, 2], 0))
    ids = tiny_tokenizer(rendered, add_special_tokens=False).input_ids
    assert ids[0] == tiny_tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    assert tiny_tokenizer.convert_tokens_to_ids("<|eot_id|>") in ids
    assert tiny_tokenizer.decode(ids) == rendered


def test_prompt_hash():
    assert prompt_hash("abc") == "ba7816bf8f01cfea"  # sha256("abc") = ba7816bf8f01cfea414140de...
    assert prompt_hash("Black Blue") != prompt_hash("Black Blue\n")
    assert len(prompt_hash("")) == 16


def test_templates_keep_their_trailing_newline_in_source():
    """The texts end with a newline that rendering drops, as in the published run (Jinja's default)."""
    assert prompts.FIRST_TURN_TEMPLATE.endswith("reference examples.\n")
    assert prompts.REFINEMENT_TEMPLATE.endswith("reference examples.\n")
