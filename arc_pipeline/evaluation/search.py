"""The search at equal budget (docs/scoring.md, "Search in rounds"): what each refiner's search has found after
each round, against the base model's independent predictions at the same number of predictions per task.

A point of the search is a set of executions per task: a schedule's first ``B0`` baseline predictions, plus one
refiner's refinements of rounds 1..r; independent sampling's point at budget ``b`` is the first ``b`` baseline
predictions. Per point and task: ``is_correct`` (some prediction right on train and some on test, as in runs.md)
and the Kaggle score of two voted attempts (``kaggle_score``: the share of the task's test inputs with a right
attempt). Means get paired bootstrap intervals over tasks, and each search point its gain over independent
sampling at the same budget (the same resampled tasks).

Whether a round explored is counted too: per point and task, the predictions its last round added
(``round_predictions``) and the distinct outputs among them that no earlier prediction of the task in that search
gave (``new_outputs``, by output fingerprint). A refiner that writes the program of its round before again, whatever
its prompt, adds predictions and no new outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from arc_pipeline.domain.tasks import Task
from arc_pipeline.evaluation.bootstrap import paired_bootstrap
from arc_pipeline.evaluation.runs import first_half, refiner_label
from arc_pipeline.scoring.submission import build_submission, score_submission
from arc_pipeline.scoring.tables import task_metrics
from arc_pipeline.scoring.voting import vote
from arc_pipeline.stages.evaluate_config import schedule_name

INDEPENDENT = "independent"  # the schedule label of the base model's independent predictions
INDEPENDENT_LABEL = "base, independent"


@dataclass(frozen=True)
class SearchPoint:
    """What one search (or independent sampling) holds after ``round`` rounds: ``predictions`` per task spent."""

    schedule: str
    refiner: str | None
    round: int
    predictions: int
    executions: pl.DataFrame

    @property
    def model(self) -> str:
        return INDEPENDENT_LABEL if self.refiner is None else refiner_label(self.refiner)

    @property
    def key(self) -> str:
        return f"{self.schedule}/{self.refiner or INDEPENDENT}/{self.round}"


def budgets(schedules: Sequence[Sequence[int]]) -> list[int]:
    """Every number of predictions per task some schedule has spent after one of its rounds (or its start)."""
    return sorted({sum(schedule[: r + 1]) for schedule in schedules for r in range(len(schedule))})


def search_points(
    baseline_predictions: pl.DataFrame,
    baseline_executions: pl.DataFrame,
    rounds: Mapping[tuple[str, str], pl.DataFrame],
    schedules: Sequence[Sequence[int]],
    refiners: Sequence[str],
) -> list[SearchPoint]:
    """Independent sampling at every budget, then per schedule and refiner its start and each round.

    ``rounds`` maps (refiner, schedule prefix name) to that round's executions: the round that ends the prefix
    (``64+64`` is round 1 after 64 independent predictions); prefixes are shared by schedules that start alike.
    """
    baseline = baseline_executions.filter(pl.col("turn") == 1)
    points = [
        SearchPoint(INDEPENDENT, None, 0, budget, first_half(baseline, baseline_predictions, budget))
        for budget in budgets(schedules)
    ]
    for schedule in schedules:
        name = schedule_name(list(schedule))
        start = first_half(baseline, baseline_predictions, schedule[0])
        for refiner in refiners:
            pool = start
            points.append(SearchPoint(name, refiner, 0, schedule[0], pool))
            for r in range(1, len(schedule)):
                prefix = schedule_name(list(schedule[: r + 1]))
                if (refiner, prefix) not in rounds:
                    raise ValueError(f"refiner {refiner}: no executions for round {r} of schedule {name} ({prefix})")
                pool = pl.concat([pool, rounds[(refiner, prefix)].select(pool.columns)], how="vertical")
                points.append(SearchPoint(name, refiner, r, sum(schedule[: r + 1]), pool))
    return points


def round_exploration(point: SearchPoint, before: SearchPoint | None) -> pl.DataFrame:
    """Per task with predictions in ``point``'s last round (those not in ``before``, the same search one round
    earlier; all of them for a search's start): ``round_predictions`` and ``new_outputs``, the distinct output
    fingerprints among them that no prediction of ``before`` gave for the task (programs without valid outputs
    have no fingerprint and are never new)."""
    executions = point.executions.select("prediction_id", "task_id", "fingerprint")
    if before is None:
        added, seen = executions, executions.clear()
    else:
        earlier = before.executions.select("prediction_id", "task_id", "fingerprint")
        added = executions.join(earlier.select("prediction_id"), on="prediction_id", how="anti")
        seen = earlier
    new = (
        added.drop_nulls("fingerprint")
        .unique(["task_id", "fingerprint"])
        .join(seen.drop_nulls("fingerprint"), on=["task_id", "fingerprint"], how="anti")
        .group_by("task_id")
        .agg(pl.len().cast(pl.Int64).alias("new_outputs"))
    )
    counts = added.group_by("task_id").agg(pl.len().cast(pl.Int64).alias("round_predictions"))
    return counts.join(new, on="task_id", how="left").with_columns(pl.col("new_outputs").fill_null(0))


def point_tasks(
    point: SearchPoint,
    tasks: Mapping[str, Task],
    test_known: Mapping[str, bool],
    before: SearchPoint | None = None,
) -> pl.DataFrame:
    """Per task of ``tasks``: ``is_correct`` and ``kaggle_score`` of the point (null where test solutions are
    unknown; 0 for a task without a prediction), and its last round's exploration (``round_exploration``; 0 for a
    task the round did not predict)."""
    metrics = task_metrics(point.executions, test_known).select("task_id", "is_correct")
    frame = pl.DataFrame({"task_id": list(tasks)}, schema={"task_id": pl.String}).join(
        metrics, on="task_id", how="left"
    )
    if all(test_known.get(task_id, False) for task_id in tasks):
        submission = build_submission(vote(point.executions), tasks)
        scores = score_submission(submission, tasks).select("task_id", pl.col("score").alias("kaggle_score"))
        frame = frame.join(scores, on="task_id", how="left").with_columns(pl.col("is_correct").fill_null(0.0))
    else:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("kaggle_score"))
    frame = frame.join(round_exploration(point, before), on="task_id", how="left").with_columns(
        pl.col("round_predictions", "new_outputs").fill_null(0)
    )
    return frame.select(
        pl.lit(point.schedule).alias("schedule"),
        pl.lit(point.refiner, dtype=pl.String).alias("refiner"),
        pl.lit(point.model).alias("model"),
        pl.lit(point.round, dtype=pl.Int64).alias("round"),
        pl.lit(point.predictions, dtype=pl.Int64).alias("predictions"),
        "task_id",
        "is_correct",
        "kaggle_score",
        "round_predictions",
        "new_outputs",
    )


def search_tasks(
    points: Sequence[SearchPoint], tasks: Mapping[str, Task], test_known: Mapping[str, bool]
) -> pl.DataFrame:
    """Every point's per-task table, stacked (``SEARCH_TASKS_SCHEMA``); each point's round is counted against the
    point before it in the same search (independent sampling: the next smaller budget)."""

    def before(point: SearchPoint) -> SearchPoint | None:
        earlier = [
            other
            for other in points
            if (other.schedule, other.refiner) == (point.schedule, point.refiner)
            and other.predictions < point.predictions
        ]
        return max(earlier, key=lambda other: other.predictions, default=None)

    return pl.concat([point_tasks(point, tasks, test_known, before(point)) for point in points], how="vertical")


def _values(per_task: pl.DataFrame, column: str) -> np.ndarray:
    return per_task.sort("task_id")[column].fill_null(0.0).to_numpy()


def search_summary(per_task: pl.DataFrame, samples: int, seed: int) -> pl.DataFrame:
    """One row per point (``SEARCH_SCHEMA``): mean ``is_correct`` with its interval, the gain over independent
    sampling at the same budget with its paired interval, the mean Kaggle score, and the last round's predictions
    and new outputs summed over tasks."""
    keys = ["schedule", "refiner", "round", "predictions"]
    groups = per_task.partition_by(keys, maintain_order=True, as_dict=True)
    independent = {key[3]: frame for key, frame in groups.items() if key[0] == INDEPENDENT}
    values: dict[str, np.ndarray] = {}
    for key, frame in groups.items():
        name = "/".join(map(str, key))
        values[name] = _values(frame, "is_correct")
        if key[0] != INDEPENDENT:
            values[f"{name}/gain"] = values[name] - _values(independent[key[3]], "is_correct")
    estimates = paired_bootstrap(values, samples, seed)
    rows = []
    for key, frame in groups.items():
        name = "/".join(map(str, key))
        gain = estimates.get(f"{name}/gain")
        kaggle = frame["kaggle_score"]
        rows.append(
            {
                **dict(zip(keys, key)),
                "model": frame["model"][0],
                "is_correct": estimates[name].mean,
                "is_correct_low": estimates[name].low,
                "is_correct_high": estimates[name].high,
                "gain_over_independent": None if gain is None else gain.mean,
                "gain_low": None if gain is None else gain.low,
                "gain_high": None if gain is None else gain.high,
                "kaggle_score": None if kaggle.null_count() else float(kaggle.mean()),
                "round_predictions": int(frame["round_predictions"].sum()),
                "new_outputs": int(frame["new_outputs"].sum()),
            }
        )
    return pl.DataFrame(rows, schema=SUMMARY_COLUMNS)


SUMMARY_COLUMNS = {
    "schedule": pl.String,
    "refiner": pl.String,
    "model": pl.String,
    "round": pl.Int64,
    "predictions": pl.Int64,
    "is_correct": pl.Float64,
    "is_correct_low": pl.Float64,
    "is_correct_high": pl.Float64,
    "gain_over_independent": pl.Float64,
    "gain_low": pl.Float64,
    "gain_high": pl.Float64,
    "kaggle_score": pl.Float64,
    "round_predictions": pl.Int64,
    "new_outputs": pl.Int64,
}


NEW_OUTPUTS_TITLE = (
    "new outputs (distinct outputs of the round's predictions that no earlier prediction of the task gave, of the "
    "round's predictions)"
)


def search_sections(summary: pl.DataFrame) -> list[tuple[str, str]]:
    """(heading, markdown table) per schedule and figure: is_correct after each round (columns: predictions per
    task spent) for independent sampling and every refiner's search, the gain over independent sampling, the
    Kaggle score, and each round's new outputs."""
    sections = []
    searched = summary.filter(pl.col("schedule") != INDEPENDENT)
    for (schedule,), frame in searched.group_by("schedule", maintain_order=True):
        spent = sorted(frame["predictions"].unique().to_list())
        independent = summary.filter((pl.col("schedule") == INDEPENDENT) & pl.col("predictions").is_in(spent))
        rows = pl.concat([independent, frame], how="vertical")
        header = "| model | " + " | ".join(f"{count} predictions" for count in spent) + " |"
        rule = "|---|" + "---:|" * len(spent)
        for title, render in (
            ("is_correct [95% interval]", _is_correct_cell),
            ("gain over independent sampling, points [95% interval]", _gain_cell),
            ("Kaggle score (2 voted attempts)", _kaggle_cell),
            (NEW_OUTPUTS_TITLE, _new_outputs_cell),
        ):
            lines = [header, rule]
            for (model,), model_rows in rows.group_by("model", maintain_order=True):
                by_budget = {row["predictions"]: row for row in model_rows.iter_rows(named=True)}
                cells = [render(by_budget[count]) if count in by_budget else "" for count in spent]
                lines.append(f"| {model} | " + " | ".join(cells) + " |")
            sections.append((f"Schedule {schedule}: {title}", "\n".join(lines)))
    return sections


def search_markdown(sections: Sequence[tuple[str, str]]) -> str:
    return "\n\n".join(f"## {heading}\n\n{table}" for heading, table in sections) + "\n"


def _is_correct_cell(row: dict) -> str:
    return f"{row['is_correct'] * 100:.1f}% [{row['is_correct_low'] * 100:.1f}, {row['is_correct_high'] * 100:.1f}]"


def _kaggle_cell(row: dict) -> str:
    return "-" if row["kaggle_score"] is None else f"{row['kaggle_score']:.1%}"


def _new_outputs_cell(row: dict) -> str:
    if not row["round_predictions"]:
        return "-"
    return f"{row['new_outputs']} of {row['round_predictions']} ({row['new_outputs'] / row['round_predictions']:.0%})"


def _gain_cell(row: dict) -> str:
    if row["gain_over_independent"] is None:
        return "-"
    mean, low, high = (row[key] * 100 for key in ("gain_over_independent", "gain_low", "gain_high"))
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}]"
