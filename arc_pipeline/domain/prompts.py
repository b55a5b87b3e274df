"""The BARC induction model's prompts (docs/prompts.md), kept byte for byte.

The model was fine-tuned on exactly these texts, so any change of wording or whitespace moves the
prompts away from its training distribution. Both user messages are Jinja2 templates rendered with
Jinja's defaults: the single trailing newline of each template text is dropped on rendering, as it
was in the published run (so a user message ends with "... reference examples." and no newline).

A first-turn prompt ends inside the assistant turn (the model continues :data:`ASSISTANT_PREFIX`);
a refinement prompt ends with the assistant header of a new turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import jinja2
import numpy as np

from arc_pipeline.domain.grids import grid_to_text
from arc_pipeline.domain.similarity import pixel_similarity
from arc_pipeline.domain.tasks import Task

Messages = list[dict[str, str]]

SYSTEM_PROMPT = (
    "You are a world-class puzzle solver with exceptional pattern recognition skills and expertise in "
    "Python programming. Your task is to analyze puzzles and provide Python solutions."
)

FIRST_TURN_TEMPLATE = """Given input-output grid pairs as reference examples, carefully observe the patterns to predict the output grid for new test input. Each pair follows the same transformation rule. Grids are 2D arrays represented as strings, with cells (colors) separated by spaces and rows by newlines.
Here are the input and output grids for the reference examples:
{% for sample in train_samples %}Example {{ loop.index }}
Input:
{{ sample.input }}

Output:
{{ sample.output }}

{% endfor %}
Here is the input grid for the test example:
{{ test }}

Write a Python function `transform` that can convert any given input grid to its corresponding output grid based on the pattern observed in the reference examples.
"""  # noqa: E501

ASSISTANT_PREFIX = (
    "Let's solve this puzzle using Python code with the common library functions. We'll first reason "
    "about the problem and then write the code to solve it. The `transform` function will take the input "
    "grid and return the output grid. Here is the Python code with the comments describing how to solve "
    "the problem:\n"
)

REFINEMENT_TEMPLATE = """Your first solution was not correct. These are the results from executing your code:
{% for sample in execution_outputs %}Example {{ loop.index }}
Execution output:
{{ sample.output }}

{{ sample.feedback_message }}

{% endfor %}
Write a revised Python function `transform` that addresses the issues in your previous attempt and correctly transforms the input grid to the output grid based on the patterns observed in the reference examples.
"""  # noqa: E501

MATCH_MESSAGE = "The output grid matches the expected output grid."

# Jinja's defaults (no autoescape, trailing newline dropped) as in the published run; undefined names fail loudly.
_ENVIRONMENT = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
_FIRST_TURN = _ENVIRONMENT.from_string(FIRST_TURN_TEMPLATE)
_REFINEMENT = _ENVIRONMENT.from_string(REFINEMENT_TEMPLATE)


def first_turn_messages(task: Task, train_order: Sequence[int], test_index: int) -> Messages:
    """System, user (train pairs in ``train_order``, test input ``test_index``), assistant prefix."""
    order = [int(index) for index in train_order]
    if sorted(order) != list(range(len(task.train))):
        raise ValueError(
            f"task {task.task_id}: train_order {order} is not a permutation of its {len(task.train)} train pairs"
        )
    if not 0 <= test_index < len(task.test):
        raise ValueError(f"task {task.task_id}: test_index {test_index} out of range ({len(task.test)} test inputs)")
    train_samples = [
        {"input": grid_to_text(task.train[i].input), "output": grid_to_text(task.train[i].output)} for i in order
    ]
    user = _FIRST_TURN.render(train_samples=train_samples, test=grid_to_text(task.test[test_index].input))
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
        {"role": "assistant", "content": ASSISTANT_PREFIX},
    ]


def feedback(expected: np.ndarray, output: np.ndarray) -> dict[str, str]:
    """The execution output and feedback message of one train example (docs/prompts.md)."""
    expected = np.asarray(expected)
    output = np.asarray(output)
    similarity = pixel_similarity(output, expected)
    if similarity == 1:
        return {"output": "", "feedback_message": MATCH_MESSAGE}
    message = (
        "The output grid does not match the expected output grid.\n"
        f"The pixel similarity score is {float(similarity):.1%}."
    )
    if expected.shape != output.shape:
        message += (
            f"\nThe expected output grid has shape {_shape(expected)}, "
            f"but the generated output grid has shape {_shape(output)}."
        )
    else:
        message += "\nThe output grid shape is correct."
    return {"output": grid_to_text(output), "feedback_message": message}


def _shape(grid: np.ndarray) -> str:
    return str(tuple(int(side) for side in grid.shape))  # "(3, 3)" whatever the integer type


def refinement_messages(
    task: Task,
    test_index: int,
    previous_text: str,
    previous_train_outputs: Sequence[np.ndarray | None],
    with_feedback: bool = True,
) -> Messages:
    """The second turn: the unshuffled first turn, the previous answer, then execution feedback.

    ``task`` and ``previous_train_outputs`` must be in the same (augmented) frame as the previous
    prompt. Every train output is needed: predictions with errors are not refined (docs/scoring.md).
    ``with_feedback=False`` renders the same turn without a single example's outputs or feedback (a mutation
    of the search, ``evaluate.search.feedback``: the canary must notice it).
    """
    if len(previous_train_outputs) != len(task.train):
        raise ValueError(
            f"task {task.task_id}: {len(previous_train_outputs)} previous train outputs for "
            f"{len(task.train)} train pairs"
        )
    execution_outputs: list[dict[str, Any]] = []
    for index, (pair, output) in enumerate(zip(task.train, previous_train_outputs, strict=True)):
        if not with_feedback:
            break
        if output is None:
            raise ValueError(
                f"task {task.task_id}: train output {index} is missing; only predictions with valid "
                "outputs can be refined"
            )
        execution_outputs.append(feedback(pair.output, output))
    messages = first_turn_messages(task, range(len(task.train)), test_index)
    messages[-1]["content"] += previous_text
    messages.append({"role": "user", "content": _REFINEMENT.render(execution_outputs=execution_outputs)})
    return messages


def render_first_turn(tokenizer: Any, messages: Messages) -> str:
    """The prompt text ending inside the assistant turn (no end-of-turn token after the prefix)."""
    return tokenizer.apply_chat_template(
        messages, tokenize=False, continue_final_message=True, add_generation_prompt=False
    )


def render_refinement(tokenizer: Any, messages: Messages) -> str:
    """The prompt text ending with the header of a new assistant turn."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def prompt_hash(prompt: str) -> str:
    """First 16 hex digits of the prompt's sha256: identifies a prompt in predictions parquets."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
