"""Kaggle-style pieces: voting, submission building/validation/scoring, pass@k."""

import json
import math

import numpy as np
import polars as pl
import pytest
from scoring_helpers import TEST_KNOWN, fixture_executions, row

from arc_pipeline.domain.tasks import Pair, Task
from arc_pipeline.scoring.execution import executions_frame
from arc_pipeline.scoring.passk import pass_at_k, pass_at_k_curve, task_counts
from arc_pipeline.scoring.submission import (
    PLACEHOLDER,
    SubmissionError,
    build_submission,
    read_submission,
    score_submission,
    submission_problems,
    validate_submission,
    write_submission,
)
from arc_pipeline.scoring.voting import vote

X, X2, Y, Y2, Z = [[1]], [[2]], [[3, 3]], [[4, 4]], [[9]]


def _rows(task_id, specs):
    """specs: (suffix, train_is_correct, train_pixel_score, test grids) or (suffix, 'error')."""
    rows = []
    for spec in specs:
        if spec[1] == "error":
            rows.append(row(f"{task_id}/{spec[0]}", task_id, error="TimeoutException"))
            continue
        suffix, ok, pixel, grids = spec
        rows.append(
            row(
                f"{task_id}/{suffix}",
                task_id,
                fp=suffix,
                train=(pixel, float(ok), ok),
                test=(0.0, 0.0, False),
                test_outputs=grids,
            )
        )
    return rows


def _voting_frame():
    rows = _rows(
        "T1",
        [
            ("p1", True, 1.0, [X, Y]),
            ("p2", True, 1.0, [X2, Y]),
            ("p3", True, 1.0, [X2, Y2]),
            *[(f"p{i}", False, 0.5, [Z, Z]) for i in range(4, 8)],
            ("p8", "error"),
        ],
    )
    rows += _rows(
        "T2", [("q1", True, 1.0, [X]), ("q2", False, 0.1, [Y]), ("q3", False, 0.1, [Y]), ("q4", False, 0.9, [Z])]
    )
    rows += _rows("T3", [("r1", False, 0.5, [X]), ("r2", False, 0.9, [Y]), ("r3", False, 0.9, [Z])])
    rows += _rows("T4", [("s1", False, 0.5, [X]), ("s2", False, 0.5, [X])])
    rows += _rows("T5", [("t1", "error")])
    return executions_frame(rows)


def _as_lists(attempts):
    return [[np.asarray(grid).tolist() for grid in grids] for grids in attempts]


def test_vote_prefers_train_correct_majority_then_the_rest():
    result = vote(_voting_frame())
    assert _as_lists(result["T1"]) == [[X2, X], [Y, Y2]]  # Z has most votes but fails train
    assert _as_lists(result["T2"]) == [[X, Y]]  # then the rest's majority
    # tie on votes: higher mean train_pixel_score first, then the smaller prediction_id
    assert _as_lists(result["T3"]) == [[Y, Z]]
    assert _as_lists(result["T4"]) == [[X]]  # one distinct candidate only
    assert "T5" not in result  # no valid prediction


def _task(task_id, tests, train=((X, X),)):
    return Task(
        task_id,
        tuple(Pair(np.array(i), np.array(o)) for i, o in train),
        tuple(Pair(np.array(i), None if o is None else np.array(o)) for i, o in tests),
    )


TASKS = [
    _task("T1", [(X, X2), (X, Y2)]),
    _task("T2", [(X, Y)]),
    _task("T3", [(X, X2)]),
    _task("T4", [(X, X)]),
    _task("T5", [(X, X)]),
]


def test_build_validate_write_and_score_submission(tmp_path):
    submission = build_submission(vote(_voting_frame()), TASKS)
    assert list(submission) == ["T1", "T2", "T3", "T4", "T5"]
    assert submission["T1"] == [{"attempt_1": X2, "attempt_2": X}, {"attempt_1": Y, "attempt_2": Y2}]
    assert submission["T4"] == [{"attempt_1": X, "attempt_2": PLACEHOLDER}]
    assert submission["T5"] == [{"attempt_1": PLACEHOLDER, "attempt_2": PLACEHOLDER}]
    validate_submission(submission, TASKS)
    path = write_submission(submission, tmp_path / "submission.json")
    loaded = read_submission(path)
    assert loaded == submission
    validate_submission(loaded, TASKS)

    scores = score_submission(loaded, TASKS)
    # T1: X2 right (attempt_1), Y2 right (attempt_2) -> 1; T2: Y in attempt_2 -> 1; T3: X2 absent -> 0;
    # T4: X right -> 1; T5: placeholder [[0]] != [[1]] -> 0
    assert scores["score"].to_list() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert scores["score"].mean() == pytest.approx(0.6)
    half = {**loaded, "T1": [loaded["T1"][0], {"attempt_1": Z, "attempt_2": Z}]}
    assert score_submission(half, TASKS)["score"][0] == 0.5


def test_validator_names_every_problem():
    good = build_submission({}, TASKS)
    bad = json.loads(json.dumps(good))
    del bad["T2"]
    bad["extra"] = []
    bad["T1"] = bad["T1"][:1]
    del bad["T3"][0]["attempt_2"]
    bad["T4"][0]["attempt_1"] = [[1.0]]
    bad["T5"][0]["attempt_1"] = [[1, 2], [3]]
    bad["T5"][0]["attempt_2"] = [[10]]
    problems = submission_problems(bad, TASKS)
    expected = [
        "task T2: missing",
        "task extra: not in the challenge set",
        "task T1: 1 entries for 2 test input(s)",
        "task T3, test input 0: attempt_2 missing",
        "task T4, test input 0: attempt_1 cell (0, 0) is float 1.0, not an int",
        "task T5, test input 0: attempt_1 row 1 has 1 cells, row 0 has 2 (not rectangular)",
        "task T5, test input 0: attempt_2 cell (0, 0) is 10, not in 0..9",
    ]
    assert sorted(problems) == sorted(expected)
    with pytest.raises(SubmissionError, match="7 problem"):
        validate_submission(bad, TASKS)


@pytest.mark.parametrize(
    ("grid", "reason"),
    [
        ([], "not a non-empty list"),
        ([[]], "row 0 is not a non-empty list"),
        ([[0]] * 31, "31 rows"),
        ([[0] * 31], "31 cells"),
        ([[np.int64(1)]], "int64"),
        ([[True]], "bool"),
    ],
)
def test_validator_grid_checks(grid, reason):
    submission = build_submission({}, TASKS)
    submission["T2"][0]["attempt_2"] = grid
    with pytest.raises(SubmissionError, match=reason):
        validate_submission(submission, TASKS)


def test_validator_rejects_non_dict():
    assert "JSON object" in submission_problems([], TASKS)[0]


def test_score_needs_solutions():
    tasks = [_task("U", [(X, None)])]
    with pytest.raises(ValueError, match="unknown"):
        score_submission(build_submission({}, tasks), tasks)


def test_pass_at_k_matches_binomials():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                expected = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert pass_at_k(5, 1, 1) == pytest.approx(0.2)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(128, 0, 64) == 0.0
    assert 0 < pass_at_k(10_000, 1, 1) < 1e-3  # large n without overflow
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_pass_at_k_curve_on_fixture():
    executions = fixture_executions()
    # solved: A has n=5, c=1 (A/1); B n=2, c=0; C excluded (test unknown)
    counts = task_counts(executions, "solved", TEST_KNOWN)
    assert counts.rows() == [("A", 5, 1), ("B", 2, 0)]
    curve = pass_at_k_curve(executions, "solved", TEST_KNOWN)
    assert curve["k"].to_list() == [1, 2]
    assert curve["pass_at_k"].to_list() == pytest.approx([(0.2 + 0) / 2, (0.4 + 0) / 2])
    curve = pass_at_k_curve(executions, "test", TEST_KNOWN)  # A: c=2, B: c=1
    assert curve["pass_at_k"].to_list() == pytest.approx([(0.4 + 0.5) / 2, (0.7 + 1.0) / 2])
    curve = pass_at_k_curve(executions, "train", TEST_KNOWN)  # A: 1 of 5, B: 1 of 2, C: 0 of 2
    assert curve["pass_at_k"].to_list() == pytest.approx([(0.2 + 0.5 + 0) / 3, (0.4 + 1 + 0) / 3])
    # k = 1 equals the mean pass rate, as in the metric table
    assert pass_at_k_curve(executions.filter(pl.col("task_id") == "A"))["pass_at_k"][0] == pytest.approx(0.2)


def test_frames_match_their_written_schemas(tmp_path):
    from arc_pipeline.io import write_table
    from arc_pipeline.schemas import COMMON_ERRORS_SCHEMA, PASS_AT_K_SCHEMA, SUBMISSION_SCORES_SCHEMA
    from arc_pipeline.scoring.tables import common_errors

    write_table(pass_at_k_curve(fixture_executions(), "solved", TEST_KNOWN), tmp_path / "p.parquet", PASS_AT_K_SCHEMA)
    scores = score_submission(build_submission(vote(_voting_frame()), TASKS), TASKS)
    write_table(scores, tmp_path / "s.parquet", SUBMISSION_SCORES_SCHEMA)
    write_table(common_errors(fixture_executions()), tmp_path / "c.parquet", COMMON_ERRORS_SCHEMA)
