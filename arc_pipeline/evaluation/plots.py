"""Figures of the evaluation report (PNG, matplotlib's Agg backend: no display needed).

* :func:`plot_pass_at_k`: one curve per run, k on a log2 axis.
* :func:`plot_training`: one panel per training metric that the run logged (reward, truncation, length, ...).
* :func:`plot_errors`: the share of predictions per error type, grouped bars per run.
* :func:`plot_examples`: per run a few solved tasks and near misses, expected beside predicted grids.

Each takes plain polars frames and writes one file; a missing input gives a figure that says so,
so the report never lacks a picture without a reason.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import polars as pl

log = logging.getLogger(__name__)

DPI = 100
# Training metrics worth a panel, in display order, with their titles. TRL's names first, then the
# pipeline's own (arc_pipeline.training.completion_stats); whatever the log has of these is drawn.
TRAINING_PANELS: tuple[tuple[str, str], ...] = (
    ("reward", "mean reward"),
    ("reward_std", "reward std"),
    ("arc/solved_share", "share of completions that solve the task"),
    ("arc/valid_outputs_share", "share with valid outputs"),
    ("completions/clipped_ratio", "share of truncated completions"),
    ("arc/truncated_share", "share of truncated completions (arc)"),
    ("completions/mean_length", "mean completion length (tokens)"),
    ("arc/solved_length_mean", "length of solving completions"),
    ("entropy", "entropy"),
    ("kl", "KL to the base model"),
    ("loss", "loss"),
    ("grad_norm", "gradient norm"),
    ("arc/memory_error_share", "share of memory errors"),
)


def _pyplot():
    os.environ.setdefault("MPLCONFIGDIR", str(Path.home() / ".cache" / "matplotlib"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    os.replace(tmp, path)
    log.info("wrote %s", path)
    return path


def _message_figure(path: Path, title: str, message: str) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=11)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def percent_limits(fractions: list[float]) -> tuple[float, float]:
    """y limits in percent for fractions in [0, 1]: from 0, with headroom, never past 100 nor below 5."""
    top = 100 * max((v for v in fractions if v is not None), default=0.0)
    return 0.0, min(100.0, max(5.0, top * 1.1))


def plot_pass_at_k(curves: pl.DataFrame, path: Path, success: str = "solved") -> Path:
    """``curves``: columns run, model, k, pass_at_k (``RUN_PASS_AT_K_SCHEMA``)."""
    title = f"pass@k on the evaluation tasks (success: {success})"
    if curves.height == 0:
        return _message_figure(path, title, "no task with known test solutions: no pass@k curve")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for (run, model), group in curves.group_by("run", "model", maintain_order=True):
        curve = group.sort("k")
        ax.plot(
            curve["k"].to_list(),
            [100 * v for v in curve["pass_at_k"].to_list()],
            marker="o" if curve.height <= 16 else None,
            markersize=3,
            label=f"{model} ({run})",
        )
    max_k = int(curves["k"].max())
    if max_k > 1:
        from matplotlib.ticker import NullFormatter, ScalarFormatter

        ax.set_xscale("log", base=2)
        ax.set_xticks([2**i for i in range(max_k.bit_length()) if 2**i <= max_k])
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("k (predictions drawn per task)")
    ax.set_ylabel("pass@k (% of tasks)")
    ax.set_ylim(*percent_limits(curves["pass_at_k"].to_list()))  # autoscale of all-zero curves shows -5%
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def training_series(metrics: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Per drawable metric its (step, value) points, non-null, in TRAINING_PANELS order."""
    if metrics.height == 0 or not {"step", "name", "value"} <= set(metrics.columns):
        return {}
    series = {}
    for name, _ in TRAINING_PANELS:
        points = metrics.filter(
            (pl.col("name") == name) & pl.col("value").is_not_null() & pl.col("value").is_finite()
        ).sort("step")
        if points.height:
            series[name] = points.select("step", "value")
    return series


def plot_training(metrics: pl.DataFrame, path: Path) -> Path:
    """``metrics``: the training log in long format (``TRAINING_METRICS_SCHEMA``: step, name, value)."""
    series = training_series(metrics)
    title = "GRPO training of the refiner"
    if not series:
        return _message_figure(path, title, "the training log has none of the plotted metrics")
    plt = _pyplot()
    titles = dict(TRAINING_PANELS)
    columns = 3 if len(series) > 4 else len(series)
    rows = math.ceil(len(series) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.8 * rows), squeeze=False)
    for ax, (name, points) in zip(axes.flat, series.items()):
        steps, values = points["step"].to_list(), points["value"].to_list()
        ax.plot(steps, values, marker="o" if len(steps) <= 20 else None, markersize=3, linewidth=1)
        ax.set_title(titles[name], fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(series) :]:
        ax.set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def plot_errors(errors: pl.DataFrame, path: Path) -> Path:
    """``errors``: run, model, error_type, share (``RUN_ERRORS_SCHEMA``); one bar group per error type."""
    title = "Share of predictions per error type (mean over tasks)"
    if errors.height == 0:
        return _message_figure(path, title, "no predictions")
    plt = _pyplot()
    types = list(dict.fromkeys(errors["error_type"].to_list()))
    runs = errors.select("run", "model").unique(maintain_order=True).rows()
    width = 0.8 / max(len(runs), 1)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(types) + 2), 0.5 * len(types) * len(runs) ** 0.5 + 2.5))
    for index, (run, model) in enumerate(runs):
        shares = dict(errors.filter(pl.col("run") == run).select("error_type", "share").rows())
        positions = [t + (index - (len(runs) - 1) / 2) * width for t in range(len(types))]
        ax.barh(positions, [100 * shares.get(name, 0.0) for name in types], height=width, label=f"{model} ({run})")
    ax.set_yticks(range(len(types)), types, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("% of predictions")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


# ARC's usual colours for the values 0-9 (black background, then blue, red, green, yellow, grey,
# magenta, orange, light blue, maroon), so that the pictures look like the puzzles people know.
ARC_COLOURS = (
    "#000000",
    "#0074D9",
    "#FF4136",
    "#2ECC40",
    "#FFDC00",
    "#AAAAAA",
    "#F012BE",
    "#FF851B",
    "#7FDBFF",
    "#870C25",
)


def example_rows(executions: pl.DataFrame, test_known: dict[str, bool], per_kind: int = 2) -> pl.DataFrame:
    """Up to ``per_kind`` solved tasks and ``per_kind`` near misses of one run, one prediction each.

    Solved: a prediction right on train and test (the first such, tasks by id). Near miss: a task no
    prediction solves, shown with its valid prediction of the highest test pixel score (above 0);
    the closest tasks first. Columns: kind, task_id, test_pixel_score, test_outputs.
    """
    rows = executions.filter(
        pl.col("task_id").is_in([t for t, known in test_known.items() if known])
        & pl.col("error_type").is_null()
        & pl.col("test_outputs").is_not_null()
    )
    right = pl.col("train_is_correct").fill_null(False) & pl.col("test_is_correct").fill_null(False)
    solved = (
        rows.filter(right)
        .sort("task_id", "prediction_id")
        .unique("task_id", keep="first", maintain_order=True)
        .head(per_kind)
        .with_columns(pl.lit("solved").alias("kind"))
    )
    solved_ids = rows.filter(right)["task_id"].unique().to_list()
    near = (
        rows.filter(~pl.col("task_id").is_in(solved_ids) & (pl.col("test_pixel_score") > 0))
        .sort(["test_pixel_score", "task_id", "prediction_id"], descending=[True, False, False])
        .unique("task_id", keep="first", maintain_order=True)
        .head(per_kind)
        .with_columns(pl.lit("near miss").alias("kind"))
    )
    columns = ["kind", "task_id", "test_pixel_score", "test_outputs"]
    return pl.concat([solved.select(columns), near.select(columns)], how="vertical")


def _draw_grid(ax, grid, title: str) -> None:
    import numpy as np
    from matplotlib.colors import ListedColormap

    values = np.asarray(grid, dtype=int)
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    if values.ndim != 2 or values.size == 0:  # nothing to draw (a program may return an empty grid)
        ax.text(0.5, 0.5, "(empty grid)", ha="center", va="center", transform=ax.transAxes)
        return
    ax.imshow(values, cmap=ListedColormap(ARC_COLOURS), vmin=0, vmax=9, interpolation="nearest")
    ax.set_xticks([x - 0.5 for x in range(1, values.shape[1])], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, values.shape[0])], minor=True)
    ax.grid(which="minor", color="#555555", linewidth=0.5)
    ax.tick_params(which="both", length=0, labelbottom=False, labelleft=False)


def plot_examples(
    runs: list[tuple[str, pl.DataFrame]], tasks: dict, test_known: dict[str, bool], path: Path, per_kind: int = 2
) -> Path:
    """Per run (label, executions) up to ``per_kind`` solved tasks and near misses: the first test
    input, the expected output and the prediction's output, side by side."""
    title = "Solved tasks and near misses: test input, expected and predicted output"
    examples = [
        (label, row)
        for label, executions in runs
        for row in example_rows(executions, test_known, per_kind).iter_rows(named=True)
    ]
    if not examples:
        return _message_figure(path, title, "no run solved or nearly solved a task with known test solutions")
    plt = _pyplot()
    fig, axes = plt.subplots(len(examples), 3, figsize=(7.5, 2.3 * len(examples)), squeeze=False)
    for (label, row), (ax_in, ax_expected, ax_predicted) in zip(examples, axes):
        task = tasks[row["task_id"]]
        score = row["test_pixel_score"]
        verdict = (
            "solved"
            if row["kind"] == "solved"
            else "near miss: test right, train wrong"
            if score >= 1.0
            else f"near miss, test pixel score {score:.0%}"
        )
        _draw_grid(ax_in, task.test_inputs[0], f"{label}\n{row['task_id']}: test input")
        _draw_grid(ax_expected, task.test_outputs[0], "expected")
        _draw_grid(ax_predicted, row["test_outputs"][0], f"predicted ({verdict})")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)


def plot_search(summary: pl.DataFrame, path: Path) -> Path:
    """``summary``: the search's points (``SEARCH_SCHEMA``): is_correct against predictions per task spent, one line
    per model and schedule (the schedules told apart by line style), 95% intervals shaded."""
    title = "search at equal budget: is_correct against predictions per task"
    if summary.height == 0:
        return _message_figure(path, title, "no search point")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = ["-", "--", ":", "-."]
    schedules = [s for s in summary["schedule"].unique(maintain_order=True).to_list() if s != "independent"]
    for (schedule, model), points in summary.group_by("schedule", "model", maintain_order=True):
        line = points.sort("predictions")
        x = line["predictions"].to_list()
        independent = schedule == "independent"
        style = "-" if independent else styles[schedules.index(schedule) % len(styles)]
        drawn = ax.plot(
            x,
            [100 * v for v in line["is_correct"].to_list()],
            linestyle=style,
            marker="o",
            markersize=3,
            color="black" if independent else None,
            label=model if independent else f"{model} ({schedule})",
        )
        low = [100 * v for v in line["is_correct_low"].to_list()]
        high = [100 * v for v in line["is_correct_high"].to_list()]
        ax.fill_between(x, low, high, alpha=0.12, color=drawn[0].get_color())
    ax.set_xlabel("predictions per task")
    ax.set_ylabel("is_correct (% of tasks)")
    ax.set_ylim(*percent_limits(summary["is_correct_high"].to_list()))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    try:
        return _save(fig, path)
    finally:
        plt.close(fig)
