"""The published execution rules (arc_pipeline/scoring/rules.py): one test per rule, on the real sandbox,
through execute_predictions (scoring) and ArcReward (RL rewards); strict is the contrast each time."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.scoring.execution import execute_predictions
from arc_pipeline.scoring.rules import apply_rules, max_output_side, published_violation
from arc_pipeline.training.rewards import ArcReward

EOS = 7


def g(rows):
    return np.array(rows, dtype=np.int8)


# recolour 1 -> 2 on a 2 x 3 grid; two train pairs and one test pair
TASK = Task(
    "task1",
    train=(
        Pair(g([[1, 0, 0], [0, 0, 0]]), g([[2, 0, 0], [0, 0, 0]])),
        Pair(g([[0, 1, 0], [0, 0, 1]]), g([[0, 2, 0], [0, 0, 2]])),
    ),
    test=(Pair(g([[1, 1, 0], [0, 0, 0]]), g([[2, 2, 0], [0, 0, 0]])),),
    source="test",
)


def answer(body: str) -> str:
    return f"Here it is.\n```python\n{body}\n```\n"


SOLVES = "def transform(input_grid):\n    out = input_grid.copy()\n    out[out == 1] = 2\n    return out"
# solves the task, but mentions random (in a comment: the researchers' check was on the text)
SOLVES_WITH_RANDOM = SOLVES.replace("def transform", "# no random choice here\ndef transform")
SOLVES_WITH_TIME = "import time\n" + SOLVES
SOLVES_WITH_BARE_EXCEPT = SOLVES.replace(
    "    return out", "    try:\n        pass\n    except:\n        pass\n    return out"
)
SOLVES_AS_FLOAT = SOLVES.replace("    return out", "    return out.astype(float) + 0.25")
BOOL_OUTPUT = "def transform(input_grid):\n    return input_grid > 0"
OVERSIZE_33 = "import numpy as np\ndef transform(input_grid):\n    return np.ones((33, 33), dtype=int)"
OVERSIZE_36 = "import numpy as np\ndef transform(input_grid):\n    return np.zeros((36, 36), dtype=int)"


def run(bodies: list[str], rules: str, sandbox) -> pl.DataFrame:
    texts = [answer(body) if body is not None else "no code at all" for body in bodies]
    predictions = pl.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(len(texts))],
            "task_id": ["task1"] * len(texts),
            "turn": [1] * len(texts),
            "text": texts,
            "hflip": [False] * len(texts),
            "rot90_k": [0] * len(texts),
            "color_map": [list(range(10))] * len(texts),
        }
    )
    return execute_predictions(predictions, {"task1": TASK}, sandbox, progress=False, rules=rules)


def rewards(bodies: list[str], rules: str, sandbox) -> list[float]:
    row = TASK.to_row()
    n = len(bodies)
    reward = ArcReward("arc-v2-no-pixel-score", sandbox, [EOS], rules=rules)
    return reward(
        prompts=["p"] * n,
        completions=[answer(b) for b in bodies],
        completion_ids=[[1, EOS]] * n,
        train_inputs=[row["train_inputs"]] * n,
        train_outputs=[row["train_outputs"]] * n,
        test_inputs=[row["test_inputs"]] * n,
        test_outputs=[row["test_outputs"]] * n,
    )


@pytest.fixture(scope="module")
def sandbox():
    from arc_pipeline.sandbox import Sandbox, SandboxConfig

    with Sandbox(SandboxConfig(workers=2, timeout_s=5.0, memory_mb=2048)) as box:
        yield box


@pytest.fixture(scope="module")
def published_sandbox():
    """Configured as the stages configure it for the published rules: outputs up to 35 a side come back."""
    from arc_pipeline.sandbox import Sandbox, SandboxConfig

    with Sandbox(
        SandboxConfig(workers=1, timeout_s=5.0, memory_mb=2048, max_output_side=max_output_side("published"))
    ) as box:
        yield box


def test_rule_random_is_non_deterministic_code(sandbox):
    strict = run([SOLVES_WITH_RANDOM], "strict", sandbox).row(0, named=True)
    published = run([SOLVES_WITH_RANDOM], "published", sandbox).row(0, named=True)
    assert strict["error_type"] is None and strict["test_is_correct"]
    assert published["error_type"] == "NonDeterministicCode" and published["has_code"]
    assert rewards([SOLVES_WITH_RANDOM], "strict", sandbox) == [10.0]
    assert rewards([SOLVES_WITH_RANDOM], "published", sandbox) == [0.0]


@pytest.mark.parametrize("body", [SOLVES_WITH_TIME, SOLVES_WITH_BARE_EXCEPT])
def test_rule_unsafe_strings_are_unsafe_code(sandbox, body):
    assert run([body], "strict", sandbox)["error_type"].to_list() == [None]
    assert run([body], "published", sandbox)["error_type"].to_list() == ["UnsafeCode"]
    assert rewards([body], "published", sandbox) == [0.0]
    # UnsafeCode is checked before NonDeterministicCode, and dropped print lines are not checked
    assert published_violation("import random\nimport time\n")[0] == "UnsafeCode"
    assert published_violation("print(time.time())\n" + SOLVES) is None


def test_rule_outputs_up_to_35_pass_validation(sandbox, published_sandbox):
    # Under the published rules a 33 x 33 output is a valid (wrong) answer, carried back by the sandbox
    # and scored; a 36 x 36 one fails the researchers' own check (ValueError). Strict: both InvalidOutput.
    assert (max_output_side("strict"), max_output_side("published")) == (30, 35)
    frame = run([OVERSIZE_33, OVERSIZE_36], "published", published_sandbox)
    assert frame["error_type"].to_list() == [None, "ValueError"]
    assert "too large" in frame["error_message"][1]
    assert np.array(frame["train_outputs"][0].to_list()[0]).shape == (33, 33)
    assert frame["test_is_correct"].to_list() == [False, None]
    strict = run([OVERSIZE_33, OVERSIZE_36], "strict", sandbox)
    assert strict["error_type"].to_list() == ["InvalidOutput", "InvalidOutput"]
    assert "exceeds 30 x 30" in strict["error_message"][0]
    # the rewards see the same outcomes: valid under published (not 0, the invalid-output reward), invalid strict
    assert (
        rewards([OVERSIZE_33], "published", published_sandbox)[0] > rewards([OVERSIZE_33], "strict", sandbox)[0] == 0.0
    )


def test_rule_float_and_bool_outputs_are_cast_to_int(sandbox):
    strict = run([SOLVES_AS_FLOAT, BOOL_OUTPUT], "strict", sandbox)
    published = run([SOLVES_AS_FLOAT, BOOL_OUTPUT], "published", sandbox)
    assert strict["error_type"].to_list() == ["InvalidOutput", "InvalidOutput"]
    assert published["error_type"].to_list() == [None, None]
    assert published["test_is_correct"].to_list() == [True, False]  # 2.25 truncates to 2; bools become 0/1
    assert published["train_outputs"][1].to_list()[0] == [[1, 0, 0], [0, 0, 0]]
    assert rewards([SOLVES_AS_FLOAT], "published", sandbox) == [10.0]
    assert rewards([SOLVES_AS_FLOAT], "strict", sandbox) == [0.0]


def test_rule_empty_code_block_is_no_code(sandbox):
    strict = run(["  \n"], "strict", sandbox).row(0, named=True)
    published = run(["  \n", None], "published", sandbox)
    assert strict["has_code"] and strict["error_type"] == "MissingTransform"
    assert published["has_code"].to_list() == [False, False]
    assert published["error_type"].to_list() == ["ParsingCodeFailed", "ParsingCodeFailed"]
    assert apply_rules("\n", 3, "published").run is None


def test_published_validation_runs_every_input_before_raising(sandbox):
    # The researchers validated after all inputs ran: a later exception wins over an earlier invalid
    # output, and otherwise the first invalid output raises ValueError.
    body = (
        "def transform(input_grid):\n    if input_grid[0, 0] == 1 and input_grid[0, 1] == 1:\n"
        "        raise KeyError('third input')\n    return [[11]]\n"
    )
    assert run([body], "published", sandbox)["error_type"].to_list() == ["KeyError"]
    valid_last = body.replace("raise KeyError('third input')", "return [[1]]")
    assert run([valid_last], "published", sandbox)["error_type"].to_list() == ["ValueError"]
    with pytest.raises(ValueError, match="execution rules"):
        apply_rules("x", 1, "lenient")
