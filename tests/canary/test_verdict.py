"""The canary's verdict (arc_pipeline/evaluation/canary.py) on hand-made metrics: windows, intervals, thresholds."""

from __future__ import annotations

import polars as pl
import pytest

from arc_pipeline.evaluation.canary import bootstrap_means, decide, reward_windows, verdict_markdown, verdict_runs

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


def test_windows_are_the_first_and_last_fifth_of_the_logged_steps() -> None:
    windows = reward_windows(metrics([1.0, 2.0, 3, 3, 3, 3, 3, 3, 8.0, 10.0]), METRIC, 0.2)
    assert (windows.steps, windows.first, windows.last) == (10, 1.5, 9.0)
    assert windows.ratio == pytest.approx(6.0)


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
