"""The runs and their results table on hand-built executions (numbers worked out by hand in the
comments; the data is described in evaluation_helpers's docstring)."""

from __future__ import annotations

import polars as pl
import pytest

from arc_pipeline.evaluation import analysis
from arc_pipeline.evaluation.published import comparison_table
from arc_pipeline.evaluation.runs import (
    build_runs,
    first_half,
    first_half_ids,
    results_table,
    run_task_metrics,
    samples_per_round,
    seeds_table,
    with_dropped_prompts,
)
from arc_pipeline.scoring.tables import to_markdown
from tests.evaluation import evaluation_helpers as data

TEST_KNOWN = {"A": True, "B": True}


def make_runs():
    return build_runs(
        data.baseline_predictions(),
        data.baseline_executions(),
        {"base": data.base_executions(), "rl": data.rl_executions()},
        data.N_EVAL // 2,
        {"base": data.refinement_predictions(), "rl": data.refinement_predictions()},
        {"rl": "results/train/adapter"},
    )


def test_first_half_is_the_rounds_sampled_first():
    predictions = data.baseline_predictions()
    assert samples_per_round(predictions) == 2
    # position = round * 2 + sample_index < 2: round 0 only
    assert sorted(first_half_ids(predictions, 2)["prediction_id"].to_list()) == [
        "A/t1/r0/s0",
        "A/t1/r0/s1",
        "B/t1/r0/s0",
        "B/t1/r0/s1",
    ]
    # an odd budget cuts inside a round: position 2 is round 1, sample 0
    assert sorted(first_half_ids(predictions, 3)["prediction_id"].to_list()) == [
        "A/t1/r0/s0",
        "A/t1/r0/s1",
        "A/t1/r1/s0",
        "B/t1/r0/s0",
        "B/t1/r0/s1",
        "B/t1/r1/s0",
    ]
    half = first_half(data.baseline_executions(), predictions, 2)
    assert half["prediction_id"].to_list() == ["A/t1/r0/s0", "A/t1/r0/s1", "B/t1/r0/s0", "B/t1/r0/s1"]
    with pytest.raises(ValueError, match="at least one"):
        first_half_ids(predictions, 0)


def test_runs_combine_first_half_and_refinements():
    runs = make_runs()
    assert [(r.name, r.model, r.initial, r.refinement, r.executions.height) for r in runs] == [
        ("baseline", "base", 4, 0, 8),
        ("refine_base", "base refines", 2, 4, 12),
        ("refine_rl", "RL-refiner", 2, 4, 12),
    ]


def test_refinements_of_second_half_predictions_are_refused():
    stray = data.refinement_predictions().with_columns(pl.lit("A/t1/r1/s0").alias("parent_prediction_id"))
    with pytest.raises(ValueError, match=r"outside the first half.*A/t1/r1/s0"):
        build_runs(
            data.baseline_predictions(), data.baseline_executions(), {"rl": data.rl_executions()}, 2, {"rl": stray}
        )


def test_results_table_numbers_by_hand():
    runs = make_runs()
    results = results_table(runs, run_task_metrics(runs, TEST_KNOWN))
    rows = {row["run"]: row for row in results.iter_rows(named=True)}
    base = rows["baseline"]
    # A: 3/4 with code, B: 4/4 -> 87.5%; valid outputs A 2/4, B 3/4
    assert base["valid code"] == pytest.approx(0.875)
    assert base["valid outputs"] == pytest.approx(0.625)
    assert base["unique outputs"] == pytest.approx(0.5)  # 2 fingerprints of 4 in each task
    # train pixel A (0.5 + 1) / 4 = 0.375, B (0.25 + 0.25 + 0.75) / 4 = 0.3125
    assert base["train_pixel_score"] == pytest.approx((0.375 + 0.3125) / 2)
    assert base["train_correct_grids"] == pytest.approx((0.375 + 0.125) / 2)
    assert base["train_pass_rate"] == pytest.approx(0.125)
    assert base["train_is_correct"] == pytest.approx(0.5)
    assert base["test_pixel_score"] == pytest.approx((0.375 + 0.25) / 2)
    assert base["test_correct_grids"] == pytest.approx(0.25)
    assert base["test_pass_rate"] == pytest.approx(0.25)
    assert base["test_is_correct"] == pytest.approx(1.0)
    # B is right on test (b2) and never on train: correct for neither is_correct nor solved
    assert base["is_correct"] == pytest.approx(0.5)
    assert base["solved"] == pytest.approx(0.5)

    rl = rows["refine_rl"]  # 6 predictions per task: A/r0 (wrong, timeout) + 4 refinements
    assert rl["valid code"] == pytest.approx(1.0)
    assert rl["valid outputs"] == pytest.approx((4 / 6 + 3 / 6) / 2)
    assert rl["unique outputs"] == pytest.approx((3 / 6 + 2 / 6) / 2)
    assert rl["train_pixel_score"] == pytest.approx((3 / 6 + 1.5 / 6) / 2)
    assert rl["train_pass_rate"] == pytest.approx((2 / 6 + 1 / 6) / 2)
    assert rl["test_pixel_score"] == pytest.approx((3 / 6 + 1 / 6) / 2)
    assert rl["is_correct"] == rl["solved"] == pytest.approx(1.0)

    refines = rows["refine_base"]
    assert refines["valid code"] == pytest.approx((6 / 6 + 2 / 6) / 2)
    assert refines["valid outputs"] == pytest.approx((5 / 6 + 2 / 6) / 2)
    assert refines["is_correct"] == refines["solved"] == pytest.approx(0.0)


def test_seeds_format():
    runs = make_runs()
    markdown = to_markdown(seeds_table(results_table(runs, run_task_metrics(runs, TEST_KNOWN))))
    lines = markdown.splitlines()
    assert lines[0] == (
        "| initial | refinement | model | valid code | valid outputs | unique outputs | "
        "train_pixel_score | train_correct_grids | train_pass_rate | train_is_correct | "
        "test_pixel_score | test_correct_grids | test_pass_rate | test_is_correct | is_correct | "
        "solved | adapter |"
    )
    assert lines[2].startswith("| 4 | 0 | base | 87.5% | 62.5% | 50.0% |")
    assert lines[4].startswith("| 2 | 4 | RL-refiner | 100.0% | 58.3% | 41.7% | 37.5% |")
    assert lines[4].endswith("| 100.0% | 100.0% | results/train/adapter |")  # the adapter that refined
    assert len(lines) == 5


def test_adapter_column_names_each_refiners_adapter():
    results = with_dropped_prompts(results_table(make_runs(), run_task_metrics(make_runs(), TEST_KNOWN)), 3)
    assert results.columns[-2:] == ["dropped prompts", "adapter"]
    assert results["adapter"].to_list() == [None, None, "results/train/adapter"]
    with pytest.raises(ValueError, match=r"adapters of refiners without refinements: \['sft'\]"):
        build_runs(data.baseline_predictions(), data.baseline_executions(), {}, data.N_EVAL // 2, None, {"sft": "x"})


def test_published_comparison_keeps_both_sources():
    runs = make_runs()
    results = with_dropped_prompts(results_table(runs, run_task_metrics(runs, TEST_KNOWN)), 3)
    markdown = to_markdown(comparison_table(results, "strict")).splitlines()
    assert markdown[0].startswith("| source | execution rules | initial | refinement | model | valid code |")
    assert markdown[2] == (
        "| published | published | 128 | 0 | base | 99.9% | 71.7% | 49.8% | 42.1% | 2.4% | 1.6% "
        "| 16.3% | 40.9% | 2.0% | 2.0% | 23.0% | 16.3% | - | - |"
    )
    assert markdown[4].startswith("| published | published | 64 | 64 | RL-refiner | 93.7% |")
    assert markdown[4].endswith("| - | 0 |")  # solved not reported; no refinement prompt dropped
    assert markdown[5].startswith("| this run | strict | 4 | 0 | base | 87.5% |") and markdown[5].endswith("| - |")
    assert markdown[7].startswith("| this run | strict | 2 | 4 | RL-refiner |") and markdown[7].endswith("| 3 |")
    published = to_markdown(comparison_table(results, "published"))
    assert published.count("| this run | published |") == 3


def test_pass_at_k_by_hand():
    runs = make_runs()
    curves = analysis.runs_pass_at_k(runs, TEST_KNOWN)
    base = curves.filter(pl.col("run") == "baseline")["pass_at_k"].to_list()
    # A: n 4, c 1 -> k/4; B: c 0
    assert base == pytest.approx([0.125, 0.25, 0.375, 0.5])
    rl = curves.filter(pl.col("run") == "refine_rl")["pass_at_k"].to_list()
    # A: n 6, c 2 -> pass@1 = 1/3; B: n 6, c 1 -> 1/6
    assert len(rl) == 6 and rl[0] == pytest.approx(0.25) and rl[-1] == pytest.approx(1.0)


def test_kaggle_scores_and_best_run():
    runs = make_runs()
    tasks = {task.task_id: task for task in data.tasks()}
    results = [analysis.kaggle_result(run, tasks) for run in runs]
    # baseline: A's train-correct a2 is right; B's vote puts b1 (2 votes) first, then b2 (right)
    # base refines: only wrong grids (a1, b1); RL: ra1 and rb1 are train-correct and right
    assert [(r.correct, r.score) for r in results] == [(2, 1.0), (0, 0.0), (2, 1.0)]
    runs_frame = results_table(runs, run_task_metrics(runs, TEST_KNOWN))
    best = analysis.best_kaggle(results, runs_frame)
    assert best.run.name == "baseline"  # the first of equals
    assert results[1].submission["A"][0] == {"attempt_1": [[9]], "attempt_2": [[0]]}


def test_error_shares_per_run():
    errors = analysis.runs_errors(make_runs())
    shares = {(row["run"], row["error_type"]): row["share"] for row in errors.iter_rows(named=True)}
    assert shares[("baseline", "TimeoutException")] == pytest.approx(0.125)
    assert shares[("baseline", "ZeroDivisionError")] == pytest.approx(0.125)
    assert shares[("baseline", "UnsafeCode")] == 0.0
    assert shares[("refine_rl", "UnsafeCode")] == pytest.approx(3 / 6 / 2)
    assert shares[("refine_base", "ParsingCodeFailed")] == pytest.approx(4 / 6 / 2)
    # every run lists the same error types, the always-listed ones first
    types = errors.filter(pl.col("run") == "baseline")["error_type"].to_list()
    assert types[:4] == ["TimeoutException", "NonDeterministicCode", "UnsafeCode", "ParsingCodeFailed"]
    assert types == errors.filter(pl.col("run") == "refine_rl")["error_type"].to_list()
