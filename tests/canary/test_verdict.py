"""The canary's verdict (arc_pipeline/evaluation/canary.py) on hand-made metrics: windows, intervals, thresholds."""

from __future__ import annotations

import polars as pl
import pytest

from arc_pipeline.evaluation.canary import bootstrap_means, decide, reward_windows, verdict_markdown, verdict_runs
from arc_pipeline.evaluation.canary_search import missed, search_checks

METRIC = "rewards/arc-v2-no-pixel-score/mean"


def metrics(values: list[float]) -> pl.DataFrame:
    rows = [{"step": step, "epoch": None, "name": METRIC, "value": value} for step, value in enumerate(values, 1)]
    rows.append({"step": 1, "epoch": None, "name": "loss", "value": 9.0})  # other metrics do not count
    return pl.DataFrame(rows, schema={"step": pl.Int64, "epoch": pl.Float64, "name": pl.String, "value": pl.Float64})


def tasks(per_run: dict[str, list[float]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"run": run, "task_id": f"t{index}", "is_correct": value}
            for run, values in per_run.items()
            for index, value in enumerate(values)
        ]
    )


def test_windows_are_the_first_fifth_the_steps_after_it_and_the_last_fifth() -> None:
    windows = reward_windows(metrics([1.0, 2.0, 3, 3, 3, 3, 3, 3, 8.0, 10.0]), METRIC, 0.2)
    assert (windows.steps, windows.first, windows.later, windows.last) == (10, 1.5, 4.5, 9.0)
    assert (windows.ratio, windows.last_ratio) == (pytest.approx(3.0), pytest.approx(6.0))


def test_a_policy_that_learned_early_passes_whatever_tasks_its_last_window_drew_and_a_collapse_fails() -> None:
    """One task per step: a settled policy scores 10 or 1 by the task alone, so a last window that drew the tasks
    its program cannot solve reads low (the pinned stack's GPU canary: 1.49x); the steps after the first window
    decide, and the last window only has to stay above the first (a policy that collapsed does not)."""
    estimates = bootstrap_means(
        tasks({"refine_base": [0, 0, 1, 0], "refine_rl": [1, 1, 1, 0]}), ["refine_base", "refine_rl"], 100, 0
    )
    unlucky_end = reward_windows(metrics([2.0, 4.0, 10, 10, 10, 10, 10, 10, 1.0, 7.0]), METRIC, 0.2)
    assert unlucky_end.last_ratio < 1.5 <= unlucky_end.ratio
    assert decide(unlucky_end, estimates, 4, 1.5, 0.15).passed
    collapsed = reward_windows(metrics([2.0, 4.0, 10, 10, 10, 10, 10, 10, 0.0, 0.0]), METRIC, 0.2)
    verdict = decide(collapsed, estimates, 4, 1.5, 0.15)
    assert collapsed.ratio >= 1.5 and not verdict.passed
    assert verdict.reasons == [
        "training reward ended at 0.00x its start (last 20% 0.000, first 3.000), below 1.0x: the policy collapsed"
    ]


def test_too_few_steps_for_two_windows_is_an_error_naming_the_metric() -> None:
    with pytest.raises(ValueError, match=METRIC):
        reward_windows(metrics([1.0]), METRIC, 0.2)


def test_gain_is_paired_over_tasks_and_its_interval_covers_it() -> None:
    table = tasks(
        {
            "baseline": [0, 0, 1, 0, 1, 0, 0, 0, 1, 0],
            "refine_base": [0, 1, 1, 0, 1, 0, 0, 0, 1, 0],
            "refine_rl": [1, 1, 1, 1, 1, 0, 1, 0, 1, 1],
        }
    )
    estimates = bootstrap_means(table, ["baseline", "refine_base", "refine_rl"], samples=500, seed=0)
    assert estimates["refine_rl"].mean == pytest.approx(0.8)
    assert estimates["gain"].mean == pytest.approx(0.4)
    assert 0 <= estimates["gain"].low <= 0.4 <= estimates["gain"].high <= 1


def test_pass_needs_both_thresholds() -> None:
    rising = reward_windows(metrics([2.0] * 5 + [4.0] * 5), METRIC, 0.2)
    flat = reward_windows(metrics([2.0] * 10), METRIC, 0.2)
    good = bootstrap_means(
        tasks({"refine_base": [0, 0, 1, 0], "refine_rl": [1, 1, 1, 0]}), ["refine_base", "refine_rl"], 100, 0
    )
    none = bootstrap_means(
        tasks({"refine_base": [0, 0, 1, 0], "refine_rl": [0, 0, 1, 0]}), ["refine_base", "refine_rl"], 100, 0
    )
    assert decide(rising, good, 4, 1.5, 0.15).passed
    missed_reward = decide(flat, good, 4, 1.5, 0.15)
    assert not missed_reward.passed and "training reward" in missed_reward.reasons[0]
    missed_gain = decide(rising, none, 4, 1.5, 0.15)
    assert not missed_gain.passed and "RL-refiner" in missed_gain.reasons[0]


def test_every_refiner_gets_a_row_and_the_gain_stays_rl_over_base_refines() -> None:
    table = tasks(
        {
            "baseline": [0, 0, 1, 0],
            "refine_base": [0, 0, 1, 0],
            "refine_rl": [1, 1, 1, 0],
            "refine_sft": [0, 1, 1, 0],
            "refine_sft_rl": [1, 1, 1, 1],
        }
    )
    runs = verdict_runs(table)
    assert runs == ["baseline", "refine_base", "refine_rl", "refine_sft", "refine_sft_rl"]
    estimates = bootstrap_means(table, runs, 100, 0)
    assert estimates["gain"].mean == pytest.approx(0.5)  # RL-refiner - base refines, whatever else ran
    verdict = decide(reward_windows(metrics([2.0] * 5 + [4.0] * 5), METRIC, 0.2), estimates, 4, 1.5, 0.15)
    markdown = verdict_markdown(verdict, METRIC)
    assert "| SFT-refiner | 50.0% [" in markdown and "| SFT+RL-refiner | 100.0% [" in markdown


def test_the_sft_refiner_must_beat_base_refines_and_sft_then_rl_is_reported_not_checked() -> None:
    """With refiner sft evaluated, its gain over base refines is a third threshold; SFT then RL against RL alone
    is a paired interval in the table whatever its sign."""
    rising = reward_windows(metrics([2.0] * 5 + [4.0] * 5), METRIC, 0.2)
    runs = {"baseline": [0, 0, 1, 0], "refine_base": [0, 0, 1, 0], "refine_rl": [1, 1, 1, 0]}
    weak_sft = bootstrap_means(
        tasks({**runs, "refine_sft": [0, 0, 1, 0], "refine_sft_rl": [0, 1, 1, 0]}),
        [*runs, "refine_sft", "refine_sft_rl"],
        200,
        0,
    )
    verdict = decide(rising, weak_sft, 4, 1.5, 0.15, min_sft_gain=0.15)
    assert not verdict.passed and verdict.reasons == [
        "SFT-refiner is_correct +0.0 points over base refines, below +15.0"
    ]
    assert verdict.sft_rl_vs_rl["mean"] == pytest.approx(-0.25)  # worse than RL alone: reported, not a reason
    markdown = verdict_markdown(verdict, METRIC)
    assert "| **SFT-refiner - base refines** | **0.0 pts [" in markdown
    assert "| SFT+RL-refiner - RL-refiner (reported, not checked) | -25.0 pts [" in markdown
    assert set(verdict.is_correct) == {"baseline", "refine_base", "refine_rl", "refine_sft", "refine_sft_rl"}

    strong_sft = bootstrap_means(tasks({**runs, "refine_sft": [1, 0, 1, 1]}), [*runs, "refine_sft"], 200, 0)
    passed = decide(rising, strong_sft, 4, 1.5, 0.15, min_sft_gain=0.15)
    assert passed.passed and passed.sft_gain["mean"] == pytest.approx(0.5) and passed.sft_rl_vs_rl is None
    without_sft = decide(rising, bootstrap_means(tasks(runs), list(runs), 200, 0), 4, 1.5, 0.15, min_sft_gain=0.15)
    assert without_sft.passed and without_sft.sft_gain is None and without_sft.min_sft_gain is None
    assert "SFT" not in verdict_markdown(without_sft, METRIC)


def search_table(per_point: dict[tuple[str, str | None, int, int], list[float]]) -> pl.DataFrame:
    """SEARCH_TASKS_SCHEMA rows: (schedule, refiner, round, predictions) -> is_correct per task; each point's round
    made one prediction per task, with a new output where it is right."""
    return pl.DataFrame(
        [
            {
                "schedule": schedule,
                "refiner": refiner,
                "model": refiner or "base, independent",
                "round": round_index,
                "predictions": predictions,
                "task_id": f"t{index}",
                "is_correct": value,
                "kaggle_score": value,
                "round_predictions": 1,
                "new_outputs": int(value),
            }
            for (schedule, refiner, round_index, predictions), values in per_point.items()
            for index, value in enumerate(values)
        ]
    )


def test_the_search_check_compares_the_searches_at_their_full_budget() -> None:
    """The RL-refiner's search against base refines' at the last round (not an earlier one), each search against
    independent sampling at the same budget; a search that misses the margin is a reason."""
    table = search_table(
        {
            ("independent", None, 0, 1): [0, 0, 0, 0],
            ("independent", None, 0, 3): [1, 0, 0, 0],
            ("1+1+1", "base", 1, 2): [0, 0, 0, 0],
            ("1+1+1", "base", 2, 3): [1, 0, 0, 0],
            ("1+1+1", "rl", 1, 2): [0, 0, 0, 0],  # round 1 no better than base: the check reads round 2
            ("1+1+1", "rl", 2, 3): [1, 1, 1, 0],
        }
    )
    [check] = search_checks(table, 200, 0)
    assert (check.schedule, check.predictions, check.rounds) == ("1+1+1", 3, 2)
    assert check.rl_over_base["mean"] == pytest.approx(0.5)
    assert check.over_independent["RL-refiner"]["mean"] == pytest.approx(0.5)
    assert check.over_independent["base refines"]["mean"] == pytest.approx(0.0)
    assert missed([check], 0.25) == []
    assert missed([check], 0.6) == [
        (
            "schedule 1+1+1: the RL-refiner's search is_correct +50.0 points over base refines' search at 3 "
            "predictions, below +60.0"
        )
    ]
    rising = reward_windows(metrics([2.0] * 5 + [4.0] * 5), METRIC, 0.2)
    good = bootstrap_means(
        tasks({"refine_base": [0, 0, 1, 0], "refine_rl": [1, 1, 1, 0]}), ["refine_base", "refine_rl"], 100, 0
    )
    failed = decide(rising, good, 4, 1.5, 0.15, search=[check], min_search_gain=0.6)
    assert not failed.passed and failed.reasons == missed([check], 0.6)
    markdown = verdict_markdown(failed, METRIC)
    assert "| **RL-refiner's search - base refines' search** | **50.0 pts [" in markdown
    assert "| RL-refiner, search | 75.0% [" in markdown
    assert check.new_outputs == {"base refines, search": (1, 4), "RL-refiner, search": (3, 4)}
    assert "| 3 of 4 |" in markdown
    with pytest.raises(ValueError, match=r"refiners \['rl'\] did not search"):
        search_checks(table.filter(pl.col("refiner") != "rl"), 200, 0)
