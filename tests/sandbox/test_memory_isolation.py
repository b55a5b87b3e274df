"""No program may observe another program's bytes (docs/sandbox.md, "What one program can see").

The thief below reads raw memory the way a hostile program can without ctypes: it wraps a numpy array
around an address (``__array_interface__``) and copies it through a pipe of its own, so that an unmapped
page gives EFAULT instead of a crash. It scans the heap and the areas around live objects for a marker
planted in the previous program's source and inputs and reports every token it finds as an output grid.
A control token in its own source and inputs proves that the scan does see memory.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from arc_pipeline.sandbox import Sandbox, SandboxConfig

HEADER = list(range(9, -1, -1))  # the cells in front of a token in an input grid


def _token() -> str:
    return "".join(secrets.choice("123456789") for _ in range(16))


THIEF = """
import os
# control: STOLEN:{control}
SPAN = 48 << 20
PAGE = 4096

class _Raw:
    def __init__(self, address, size):
        self.__array_interface__ = {{"shape": (size,), "typestr": "|u1", "data": (address, True), "version": 3}}

def _tokens(data, needle, step, found):
    start = data.find(needle)
    while start >= 0:
        tail = data[start + len(needle): start + len(needle) + 16 * step]
        digits = tail[::step] if step > 1 else tail
        if step == 1 and len(digits) == 16 and all(49 <= d <= 57 for d in digits):
            found.add(digits.decode())  # the token as text
        elif len(digits) == 16 and all(1 <= d <= 9 for d in digits) and (
                step == 1 or all(b == 0 for i, b in enumerate(tail) if i % step)):
            found.add("".join(str(d) for d in digits))  # the token as int8 or int64 cells
        start = data.find(needle, start + 1)

def transform(grid):
    read_end, write_end = os.pipe()
    text_needle = b"STO" + b"LEN:"
    small = bytes(range(9, -1, -1))
    wide = np.arange(9, -1, -1).astype("<i8").tobytes()
    anchors = [np.empty(4096, dtype=np.uint8).__array_interface__["data"][0], id(grid), id(transform),
               grid.__array_interface__["data"][0], id(os)]
    found = set()
    seen = set()
    for anchor in anchors:
        base = (anchor // PAGE) * PAGE
        previous = b""
        for address in range(base - SPAN, base + SPAN, PAGE):
            if address in seen or address <= 0:
                previous = b""
                continue
            seen.add(address)
            try:
                written = os.write(write_end, memoryview(np.asarray(_Raw(address, PAGE))))
            except OSError:
                previous = b""
                continue
            page = os.read(read_end, written)
            window = previous + page
            _tokens(window, text_needle, 1, found)
            _tokens(window, small, 1, found)
            _tokens(window, wide, 8, found)
            previous = page[-256:]
    rows = [[int(c) for c in token] for token in sorted(found)][:30] or [[0] * 16]
    return np.array(rows)
"""


def _victim(token: str) -> tuple[str, list[np.ndarray]]:
    padding = "".join(f"# padding line {i:05d} that makes this program's text large\n" for i in range(400))
    code = f"{padding}SECRET = 'STOLEN:{token}'\ndef transform(grid):\n    return grid\n"
    grid = np.array([HEADER + [int(c) for c in token]], dtype=np.int8)
    return code, [grid, grid.copy()]


def _stolen(result) -> set[str]:
    assert result.error_type is None, (result.error_type, result.error_message)
    return {"".join(str(int(v)) for v in row) for row in result.outputs[0].tolist()}


@pytest.fixture(scope="module", params=["audit-hook", "kernel-only"])
def scan_sandbox(request):
    # one worker, so that the thief is forked from the worker that ran its victim
    with Sandbox(
        SandboxConfig(workers=1, timeout_s=30.0, memory_mb=1024), audit_hook=request.param == "audit-hook"
    ) as box:
        yield box


def test_program_cannot_read_previous_programs_source_or_inputs(scan_sandbox):
    for _ in range(2):
        victim_token, control_token = _token(), _token()
        code, inputs = _victim(victim_token)
        assert scan_sandbox.run(code, inputs).error_type is None
        own_input = np.array([HEADER + [int(c) for c in control_token]], dtype=np.int8)
        stolen = _stolen(scan_sandbox.run(THIEF.format(control=control_token), [own_input]))
        assert control_token in stolen, "the scan did not even see the thief's own source and input"
        assert victim_token not in stolen, "a program read the previous program's source or inputs"


def test_expected_outputs_never_reach_the_program(scan_sandbox):
    """Through the execute stage's own path: the task's expected outputs carry a token; the program's
    scan sees its inputs (the control token) but never an expected output."""
    import polars as pl

    from arc_pipeline.domain.tasks import Pair, Task
    from arc_pipeline.scoring.execution import execute_predictions

    control_token, train_token, test_token = _token(), _token(), _token()

    def grid(token):
        return np.array([HEADER + [int(c) for c in token]], dtype=np.int8)

    task = Task(
        "t1",
        train=(Pair(grid(control_token), grid(train_token)),),
        test=(Pair(grid(control_token), grid(test_token)),),
        source="test",
    )
    text = f"```python\n{THIEF.format(control=control_token)}\n```"
    predictions = pl.DataFrame(
        {
            "prediction_id": ["p0"],
            "task_id": ["t1"],
            "turn": [1],
            "text": [text],
            "hflip": [False],
            "rot90_k": [0],
            "color_map": [list(range(10))],
        }
    )
    row = execute_predictions(predictions, {"t1": task}, scan_sandbox, progress=False).row(0, named=True)
    assert row["error_type"] is None, (row["error_type"], row["error_message"])
    stolen = {"".join(str(v) for v in line) for out in row["train_outputs"] + row["test_outputs"] for line in out}
    assert control_token in stolen
    assert train_token not in stolen and test_token not in stolen
