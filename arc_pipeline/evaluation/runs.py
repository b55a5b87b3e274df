"""Evaluation runs: which predictions make up each row of the results table (docs/scoring.md, docs/defaults.md).

The baseline run is every first-turn prediction of the evaluation tasks (``n_eval`` per task). A
refinement run is the *first half* of them (the predictions whose position ``round * n +
sample_index`` is below ``n_eval / 2``: the rounds sampled first) plus one refiner's refinements of
that half's wrong answers. Comparing them at the same budget tells whether refining beats sampling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from arc_pipeline.scoring.tables import runs_table, summary_row, task_metrics

log = logging.getLogger(__name__)

BASELINE_RUN = "baseline"
BASELINE_LABEL = "base"
# refiner name (rules/evaluate.smk) -> its label in the published tables (docs/defaults.md); others keep their name
REFINER_LABELS = {"base": "base refines", "rl": "RL-refiner", "sft": "SFT-refiner", "sft_rl": "SFT+RL-refiner"}
# runs.parquet / runs.md: the adapter folder that produced a run's refinements (null: the base model's)
ADAPTER = "adapter"


def refiner_label(refiner: str) -> str:
    return REFINER_LABELS.get(refiner, refiner)


def refinement_run(refiner: str) -> str:
    """The run id of a refiner (also the folder name ``evaluate/refine_<refiner>``)."""
    return f"refine_{refiner}"


def samples_per_round(predictions: pl.DataFrame) -> int:
    """``n``: samples per round (prompt) of the first-turn predictions, from their ``sample_index``."""
    first = predictions.filter(pl.col("turn") == 1)
    if first.height == 0:
        raise ValueError("no first-turn predictions")
    return int(first["sample_index"].max()) + 1


def first_half_ids(predictions: pl.DataFrame, n_first: int) -> pl.DataFrame:
    """Column ``prediction_id`` of the first-turn predictions with ``round * n + sample_index < n_first``."""
    if n_first < 1:
        raise ValueError(f"the first half must hold at least one prediction per task, got {n_first}")
    n = samples_per_round(predictions)
    position = pl.col("round").cast(pl.Int64) * n + pl.col("sample_index").cast(pl.Int64)
    return predictions.filter((pl.col("turn") == 1) & (position < n_first)).select("prediction_id")


def first_half(executions: pl.DataFrame, predictions: pl.DataFrame, n_first: int) -> pl.DataFrame:
    """The executions of the first ``n_first`` predictions of each task (see :func:`first_half_ids`)."""
    return executions.join(first_half_ids(predictions, n_first), on="prediction_id", how="semi", maintain_order="left")


def most_per_task(executions: pl.DataFrame) -> int:
    """The most predictions any task has (the count a results table reports: 128, 64, ...)."""
    if executions.height == 0:
        return 0
    return int(executions.group_by("task_id").len()["len"].max())


@dataclass(frozen=True)
class Run:
    """One row of the results table: its id, label, prediction counts and executions."""

    name: str
    model: str
    initial: int
    refinement: int
    executions: pl.DataFrame
    adapter: str | None = None

    def labels(self) -> dict[str, object]:
        return {"initial": self.initial, "refinement": self.refinement, "model": self.model}


def check_parents(refinement_predictions: pl.DataFrame, first_ids: pl.DataFrame, source: str) -> None:
    """Every refinement must refine a first-half prediction, else the runs mix budgets."""
    parents = refinement_predictions.select(pl.col("parent_prediction_id").alias("prediction_id"))
    stray = parents.join(first_ids, on="prediction_id", how="anti")
    if stray.height:
        raise ValueError(
            f"{source}: {stray.height} refinements refine predictions outside the first half, "
            f"e.g. {stray['prediction_id'][0]!r} (was refine-prompts run with another --first-predictions?)"
        )


def build_runs(
    baseline_predictions: pl.DataFrame,
    baseline_executions: pl.DataFrame,
    refinements: Mapping[str, pl.DataFrame],
    n_first: int,
    refinement_predictions: Mapping[str, pl.DataFrame] | None = None,
    adapters: Mapping[str, str] | None = None,
) -> list[Run]:
    """The baseline run, then one run per refiner (in the mapping's order).

    ``refinements`` maps a refiner name to its executions; ``refinement_predictions`` (same keys),
    when given, is checked to refine only first-half predictions; ``adapters`` names the adapter folder of
    each refiner that has one.
    """
    adapters = adapters or {}
    stray = sorted(set(adapters) - set(refinements))
    if stray:
        raise ValueError(f"adapters of refiners without refinements: {stray}")
    baseline = baseline_executions.filter(pl.col("turn") == 1)
    runs = [Run(BASELINE_RUN, BASELINE_LABEL, most_per_task(baseline), 0, baseline)]
    first_ids = first_half_ids(baseline_predictions, n_first)
    half = baseline.join(first_ids, on="prediction_id", how="semi", maintain_order="left")
    tasks = set(baseline["task_id"].unique().to_list())
    for refiner, executions in refinements.items():
        if refinement_predictions is not None and refiner in refinement_predictions:
            check_parents(refinement_predictions[refiner], first_ids, f"refiner {refiner}")
        unknown = set(executions["task_id"].unique().to_list()) - tasks
        if unknown:
            raise ValueError(
                f"refiner {refiner}: refinements of tasks without baseline predictions: {sorted(unknown)[:5]}"
            )
        combined = pl.concat([half, executions.select(half.columns)], how="vertical")
        runs.append(
            Run(
                refinement_run(refiner),
                refiner_label(refiner),
                most_per_task(half),
                most_per_task(executions),
                combined,
                adapters.get(refiner),
            )
        )
    return runs


def run_task_metrics(runs: list[Run], test_known: Mapping[str, bool]) -> dict[str, pl.DataFrame]:
    """Per run its per-task metric table (tasks only)."""
    return {run.name: task_metrics(run.executions, test_known) for run in runs}


def results_table(runs: list[Run], metrics: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """One row per run: ``run, initial, refinement, model``, the MEAN metrics and ``adapter`` (``RUNS_SCHEMA``)."""
    rows = [summary_row(metrics[run.name], {"run": run.name, **run.labels()}) for run in runs]
    adapters = pl.Series(ADAPTER, [run.adapter for run in runs], dtype=pl.String)
    return runs_table(rows).with_columns(pl.col("initial", "refinement").cast(pl.Int64), adapters)


DROPPED_PROMPTS = "dropped prompts"


def with_dropped_prompts(results: pl.DataFrame, dropped: int | None) -> pl.DataFrame:
    """Add the ``dropped prompts`` column: per refinement run, the refinement prompts that refine-prompts
    dropped as longer than the refinement inference's context allows (the same prompts for every
    refiner); null for the baseline, which has none, and everywhere when the count is unknown."""
    count = pl.lit(dropped, dtype=pl.Int64)
    column = pl.when(pl.col("run") == BASELINE_RUN).then(pl.lit(None, dtype=pl.Int64)).otherwise(count)
    return results.with_columns(column.alias(DROPPED_PROMPTS)).select(pl.exclude(ADAPTER), ADAPTER)  # adapter last


def seeds_table(results: pl.DataFrame) -> pl.DataFrame:
    """The results table as the published one prints it (docs/defaults.md columns, plus ``solved``): no run id."""
    return results.drop("run")
