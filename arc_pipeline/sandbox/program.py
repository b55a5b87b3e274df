"""Turning a model's answer into the program text the sandbox runs (docs/scoring.md)."""

from __future__ import annotations

_FENCE_OPEN = "```python"
_FENCE_CLOSE = "```"
_DROPPED_MARKERS = ("print(", "from common import *")

#: What every program has in scope before its own first line (docs/scoring.md).
PRELUDE = "from typing import List, Tuple\nimport numpy as np\nimport numpy\nfrom common import *\n"


def extract_code(text: str) -> str | None:
    """The text between the first ```` ```python ```` and the next ```` ``` ````; None if absent.

    An opening fence with no closing fence counts as absent: the answer was cut off.
    """
    start = text.find(_FENCE_OPEN)
    if start < 0:
        return None
    start += len(_FENCE_OPEN)
    end = text.find(_FENCE_CLOSE, start)
    if end < 0:
        return None
    return text[start:end]


def prepare_code(code: str) -> str:
    """Drop every line containing ``print(`` or ``from common import *`` (docs/scoring.md).

    Prints would waste time and the star import is replaced by the prelude the sandbox runs first.
    """
    return "\n".join(line for line in code.split("\n") if not any(marker in line for marker in _DROPPED_MARKERS))
