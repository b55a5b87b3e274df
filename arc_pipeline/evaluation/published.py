"""The published results (docs/defaults.md) and a table that puts this run beside them.

Shown only for the published preset (``evaluate.compare_with_published``): other configs evaluate
other tasks or budgets, where the published numbers would mislead.
"""

from __future__ import annotations

import polars as pl

from arc_pipeline.evaluation.runs import ADAPTER, DROPPED_PROMPTS
from arc_pipeline.schemas import TASK_METRIC_COLUMNS
from arc_pipeline.scoring.tables import runs_table

# ARC-AGI-1 evaluation, 400 tasks (docs/defaults.md); shares, not percentages.
# The published tables report every task metric but the prediction count and "solved".
PUBLISHED_COLUMNS = tuple(name for name in TASK_METRIC_COLUMNS if name not in ("n_preds", "solved"))
PUBLISHED_ROWS: tuple[tuple[int, int, str, tuple[float, ...]], ...] = (
    (128, 0, "base", (99.9, 71.7, 49.8, 42.1, 2.4, 1.6, 16.3, 40.9, 2.0, 2.0, 23.0, 16.3)),
    (64, 64, "base refines", (99.7, 74.0, 43.7, 45.8, 2.1, 1.1, 16.5, 44.4, 1.7, 1.6, 21.5, 16.0)),
    (64, 64, "RL-refiner", (93.7, 76.5, 42.5, 48.7, 3.1, 1.6, 18.5, 47.2, 2.5, 2.4, 24.5, 17.8)),
)


# The published runs executed programs under the researchers' runner (execute.rules: published).
PUBLISHED_RULES = "published"
RULES_COLUMN = "execution rules"


def published_table() -> pl.DataFrame:
    """The three published rows: initial, refinement, model, the twelve metrics as shares and the
    dropped refinement prompts (none: their refinement context was 14,500 tokens)."""
    rows = [
        {
            "initial": initial,
            "refinement": refinement,
            "model": model,
            **{name: value / 100 for name, value in zip(PUBLISHED_COLUMNS, values)},
            DROPPED_PROMPTS: 0 if refinement else None,
        }
        for initial, refinement, model, values in PUBLISHED_ROWS
    ]
    return pl.DataFrame(rows).with_columns(pl.col("initial", "refinement", DROPPED_PROMPTS).cast(pl.Int64))


def comparison_table(results: pl.DataFrame, rules: str) -> pl.DataFrame:
    """Published rows then this run's rows; ``source`` tells them apart and ``execution rules`` names
    the rules each was scored under (``rules``: this run's ``execute.rules``). This run's ``solved``
    column is kept, null ("-") for the published rows, which did not report it."""
    ours = results.drop("run", ADAPTER, strict=False).with_columns(
        pl.lit("this run").alias("source"), pl.lit(rules).alias(RULES_COLUMN)
    )
    published = published_table().with_columns(
        pl.lit("published").alias("source"), pl.lit(PUBLISHED_RULES).alias(RULES_COLUMN)
    )
    table = runs_table([published, ours])
    # this run's column order (published rows lack `solved`, which would otherwise come last)
    first = ("source", RULES_COLUMN)
    order = [c for c in ours.columns if c not in first] + [c for c in table.columns if c not in ours.columns]
    return table.select(*first, *order)
