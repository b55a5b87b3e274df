"""Figures of the evaluation report (PNG, matplotlib's Agg backend: no display needed).

* :func:`plot_pass_at_k`: one curve per run, k on a log2 axis.
* :func:`plot_training`: one panel per training metric that the run logged (reward, truncation, length, ...).
* :func:`plot_errors`: the share of predictions per error type, grouped bars per run.

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
    for (run, model), curve in curves.group_by("run", "model", maintain_order=True):
        curve = curve.sort("k")
        ax.plot(curve["k"].to_list(), [100 * v for v in curve["pass_at_k"].to_list()],
                marker="o" if curve.height <= 16 else None, markersize=3, label=f"{model} ({run})")
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
        points = metrics.filter((pl.col("name") == name) & pl.col("value").is_not_null()
                                & pl.col("value").is_finite()).sort("step")
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
    for ax in list(axes.flat)[len(series):]:
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
