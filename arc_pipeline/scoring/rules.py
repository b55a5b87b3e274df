"""Execution rules: the project's (``strict``) or the researchers' runner's (``published``).

``strict`` (the default) runs every program, seeded, and accepts only outputs that are integer grids of at
most 30 x 30 (docs/scoring.md). ``published`` reproduces the runner the published tables and RL
rewards were computed with (docs/reproduction.md):

1. code whose text contains one of :data:`UNSAFE_MODULES` (as ``name.`` or ``import name``),
   :data:`UNSAFE_CALLS` (as ``name(``) or :data:`UNSAFE_STRINGS` is rejected as ``UnsafeCode``, then code
   containing ``random`` anywhere (comments and ``randint`` included) as ``NonDeterministicCode``; neither
   runs. The text checked is the code after the ``print(`` / ``from common import *`` lines are dropped.
2. outputs up to 35 x 35 pass validation;
3. each output is cast with ``numpy.array(output, dtype=int)`` (floats truncate, bools become 0/1)
   before it is checked;
4. an empty code block (only whitespace between the fences) counts as no code (``ParsingCodeFailed``).

Rules 1 and 4 are text checks made here, before anything is submitted to the sandbox. Rules 2 and 3
are applied by an epilogue appended to the program (:func:`published_program`) that wraps its
``transform``: every output is cast and checked like the researchers' validation, which ran after all
inputs, so the first invalid output raises ``ValueError`` only after the last call, as theirs did.
For rule 2 the sandbox must also carry such grids back: run the rules' programs in a sandbox whose
``SandboxConfig.max_output_side`` is :func:`max_output_side` (30 strict, 35 published).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from arc_pipeline.domain.grids import MAX_GRID_SIDE
from arc_pipeline.sandbox.program import prepare_code
from arc_pipeline.sandbox.types import NON_DETERMINISTIC, PARSING_CODE_FAILED, UNSAFE

ExecutionRules = Literal["strict", "published"]
RULES: tuple[str, ...] = ("strict", "published")

#: The researchers' forbidden module names (matched as ``name.`` or ``import name``).
UNSAFE_MODULES = (
    "logging",
    "threading",
    "bcrypt",
    "datetime",
    "os.sys",
    "multiprocessing",
    "time",
    "os.path",
    "pebble",
    "hashlib",
    "sys.exit",
    "subprocess",
    "calendar",
    "os.environ",
    "matplotlib",
    "pygame",
)
#: The researchers' forbidden calls (matched as ``name(``).
UNSAFE_CALLS = ("input", ".save", "write", "open", "exec", "eval", "compile")
#: The researchers' forbidden strings (matched anywhere).
UNSAFE_STRINGS = ("except:",)
#: Any occurrence rejects the code as non-deterministic.
NON_DETERMINISTIC_STRINGS = ("random",)
#: Largest output side the researchers' validation accepted.
PUBLISHED_MAX_SIDE = 35

NO_CODE_MESSAGE = "no fenced python code block in the completion"
EMPTY_CODE_MESSAGE = "the python code block is empty"


def check_rules(rules: str) -> str:
    if rules not in RULES:
        raise ValueError(f"execution rules must be one of {list(RULES)}, got {rules!r}")
    return rules


def max_output_side(rules: str) -> int:
    """The ``SandboxConfig.max_output_side`` the rules need: 30 (ARC's limit) or 35 (the researchers')."""
    return PUBLISHED_MAX_SIDE if check_rules(rules) == "published" else MAX_GRID_SIDE


def published_violation(code: str) -> tuple[str, str] | None:
    """``(error type, message)`` when the researchers' runner refused to run ``code``, else None."""
    text = prepare_code(code)
    for module in UNSAFE_MODULES:
        if f"{module}." in text or f"import {module}" in text:
            return UNSAFE, f"the code uses a forbidden module: {module}"
    for call in UNSAFE_CALLS:
        if f"{call}(" in text:
            return UNSAFE, f"the code uses a forbidden function: {call}"
    for string in UNSAFE_STRINGS:
        if string in text:
            return UNSAFE, f"the code uses a forbidden string: {string}"
    for string in NON_DETERMINISTIC_STRINGS:
        if string in text:
            return NON_DETERMINISTIC, f"the code uses a forbidden module: {string}"
    return None


# Appended to a program under the published rules. Kept free of "print(" and "from common import *",
# which prepare_code would drop, and of names a program is likely to use.
_EPILOGUE = """

def __arc_published_rules(inner, n_inputs, max_side):
    import numpy as __arc_numpy
    state = {{"calls": 0, "depth": 0, "error": None}}

    def check(output):
        if output is None:
            raise ValueError("Output is None")
        output = __arc_numpy.array(output, dtype=int)
        if output.ndim != 2:
            raise ValueError(f"Output is not a 2D array. Output shape: {{output.shape}}")
        if max(output.shape) > max_side:
            raise ValueError(f"Output is too large. Output shape: {{output.shape}}")
        if min(output.shape) == 0:
            raise ValueError(f"Output has zero dimension, it is empty. Output shape: {{output.shape}}")
        if __arc_numpy.max(output) > 9 or __arc_numpy.min(output) < 0:
            raise ValueError("Output contains invalid values, expected values in range [0, 9]")
        return output

    def transform(grid):
        if state["depth"]:  # a recursive call by the program itself
            return inner(grid)
        state["depth"] += 1
        try:
            output = inner(grid)
        finally:
            state["depth"] -= 1
        state["calls"] += 1
        if state["error"] is None:
            try:
                output = check(output)
            except Exception as error:
                state["error"] = error
        if state["error"] is not None:
            if state["calls"] >= n_inputs:
                raise state["error"]
            return __arc_numpy.zeros((1, 1), dtype=int)
        return output

    return transform


if "transform" not in globals():
    raise NameError("name 'transform' is not defined")
transform = __arc_published_rules(transform, {n_inputs}, {max_side})
"""


def published_program(code: str, n_inputs: int) -> str:
    """``code`` followed by the epilogue that casts and checks its outputs as the researchers did."""
    if n_inputs < 1:
        raise ValueError(f"a program needs at least one input, got {n_inputs}")
    return code + _EPILOGUE.format(n_inputs=int(n_inputs), max_side=PUBLISHED_MAX_SIDE)


@dataclass(frozen=True)
class RuledProgram:
    """What to do with one completion's code under the rules.

    ``run``: the program to submit to the sandbox, or None when it must not run; then ``error_type``
    and ``message`` say why and ``has_code`` whether the completion counts as having code.
    """

    run: str | None
    has_code: bool
    error_type: str | None = None
    message: str | None = None


def apply_rules(code: str | None, n_inputs: int, rules: str = "strict") -> RuledProgram:
    """The program to run for ``code`` (``extract_code``'s result) on ``n_inputs`` inputs under ``rules``."""
    check_rules(rules)
    if code is None:
        return RuledProgram(None, False, PARSING_CODE_FAILED, NO_CODE_MESSAGE)
    if rules == "strict":
        return RuledProgram(code, True)
    if not code.strip():
        return RuledProgram(None, False, PARSING_CODE_FAILED, EMPTY_CODE_MESSAGE)
    violation = published_violation(code)
    if violation is not None:
        return RuledProgram(None, True, *violation)
    return RuledProgram(published_program(code, n_inputs), True)
