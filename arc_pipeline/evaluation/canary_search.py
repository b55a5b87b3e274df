"""The canary's search check (docs/canary.md): at each schedule's full budget, does the RL-refiner's search beat
base refines' search, and what does each refiner's search gain over the base model's independent predictions?

Reads the search's per-task table (``SEARCH_TASKS_SCHEMA``, arc_pipeline/evaluation/search.py); the differences are
paired over tasks (the same bootstrap resamples for every number of a schedule).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl

from arc_pipeline.evaluation.bootstrap import paired_bootstrap
from arc_pipeline.evaluation.runs import refiner_label
from arc_pipeline.evaluation.search import INDEPENDENT, INDEPENDENT_LABEL

CHECKED = ("rl", "base")  # the check: the first refiner's search minus the second's


@dataclass(frozen=True)
class SearchCheck:
    """One schedule at its full budget: is_correct per model, each search's gain over independent sampling, and
    the RL-refiner's search minus base refines' (each a dict of mean, low, high); per search, its last round's
    new outputs and predictions (``new_outputs``: a refiner that repeats its round before adds none)."""

    schedule: str
    predictions: int
    rounds: int
    is_correct: dict[str, dict[str, float]]
    over_independent: dict[str, dict[str, float]]
    rl_over_base: dict[str, float]
    new_outputs: dict[str, tuple[int, int]]


def search_checks(per_task: pl.DataFrame, samples: int, seed: int) -> list[SearchCheck]:
    """A check per schedule of the table; a ValueError when base or rl did not search."""
    checks = []
    searched = per_task.filter(pl.col("schedule") != INDEPENDENT)
    for (schedule,), frame in searched.group_by("schedule", maintain_order=True):
        last = frame.filter(pl.col("round") == pl.col("round").max().over("refiner"))
        budget = int(last["predictions"].max())
        refiners = last["refiner"].unique(maintain_order=True).to_list()
        missing = [name for name in CHECKED if name not in refiners]
        if missing:
            raise ValueError(f"schedule {schedule}: refiners {missing} did not search (evaluate.search.refiners)")
        independent = per_task.filter((pl.col("schedule") == INDEPENDENT) & (pl.col("predictions") == budget))
        if independent.height == 0:
            raise ValueError(f"schedule {schedule}: no independent predictions at its budget {budget}")
        values = {INDEPENDENT: _per_task(independent)}
        for refiner in refiners:
            values[refiner] = _per_task(last.filter(pl.col("refiner") == refiner))
            values[f"{refiner}/gain"] = values[refiner] - values[INDEPENDENT]
        values["rl_over_base"] = values[CHECKED[0]] - values[CHECKED[1]]
        estimates = {name: asdict(estimate) for name, estimate in paired_bootstrap(values, samples, seed).items()}
        checks.append(
            SearchCheck(
                schedule=schedule,
                predictions=budget,
                rounds=int(last["round"].max()),
                is_correct={
                    INDEPENDENT_LABEL: estimates[INDEPENDENT],
                    **{f"{refiner_label(name)}, search": estimates[name] for name in refiners},
                },
                over_independent={refiner_label(name): estimates[f"{name}/gain"] for name in refiners},
                rl_over_base=estimates["rl_over_base"],
                new_outputs={
                    f"{refiner_label(name)}, search": _explored(last.filter(pl.col("refiner") == name))
                    for name in refiners
                },
            )
        )
    return checks


def _explored(frame: pl.DataFrame) -> tuple[int, int]:
    return int(frame["new_outputs"].sum()), int(frame["round_predictions"].sum())


def _per_task(frame: pl.DataFrame):
    return frame.sort("task_id")["is_correct"].fill_null(0.0).to_numpy()


def missed(checks: list[SearchCheck], min_gain: float) -> list[str]:
    """The reason of each schedule whose RL-refiner search does not beat base refines' search by ``min_gain``."""
    return [
        f"schedule {check.schedule}: the RL-refiner's search is_correct {check.rl_over_base['mean'] * 100:+.1f} points "
        f"over base refines' search at {check.predictions} predictions, below {min_gain * 100:+.1f}"
        for check in checks
        if not check.rl_over_base["mean"] >= min_gain
    ]


def search_markdown(checks: list[dict], min_gain: float | None) -> list[str]:
    """The verdict's lines about the search (``checks``: :class:`SearchCheck` as dicts, from verdict.json)."""

    def interval(estimate: dict[str, float], unit: str = "%") -> str:
        return f"{estimate['mean'] * 100:.1f}{unit} [{estimate['low'] * 100:.1f}, {estimate['high'] * 100:.1f}]"

    lines = []
    for check in checks:
        lines += [
            "",
            (
                f"Search, schedule {check['schedule']} ({check['rounds']} rounds, {check['predictions']} predictions "
                "per task), held-out `is_correct` at the full budget:"
            ),
            "",
            "| model | is_correct | over independent sampling | new outputs in its last round |",
            "|---|---:|---:|---:|",
        ]
        for model, estimate in check["is_correct"].items():
            over = check["over_independent"].get(model.removesuffix(", search"))
            last_round = check["new_outputs"].get(model)  # (new outputs, predictions); none for independent sampling
            explored = f"{last_round[0]} of {last_round[1]}" if last_round else ""
            lines.append(
                f"| {model} | {interval(estimate)} | {'' if over is None else interval(over, ' pts')} | {explored} |"
            )
        lines.append(
            f"| **RL-refiner's search - base refines' search** | **{interval(check['rl_over_base'], ' pts')}** | | |"
        )
    if checks and min_gain is not None:
        lines += [
            "",
            (
                f"The search check needs at least {min_gain * 100:.0f} points at each schedule's full budget. "
                "New outputs: distinct outputs of the last round's predictions that no earlier prediction of the "
                "task gave, of that round's predictions (search.md has every round)."
            ),
        ]
    return lines
