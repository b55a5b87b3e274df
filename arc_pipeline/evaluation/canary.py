"""The learning canary's verdict (docs/canary.md): did training raise its reward, and does the RL-refiner beat
base refines on held-out tasks (in one round, and with evaluate.search over the search's rounds)?

Two numbers decide, each against a threshold of ``canary`` (arc_pipeline/stages/canary.py):

* the training reward: the mean of the ARC reward over the logged steps after the first ``window`` share,
  divided by its mean over that first share (and, against a collapse at the end, the last ``window`` share's
  mean must not fall below the first's);
* the held-out gain: the RL-refiner's ``is_correct`` minus base refines', averaged over the evaluation
  tasks, with a paired bootstrap over tasks for its 95% interval.

With the SFT refiner in the evaluation (``sft.enabled``) a third number decides: the SFT-refiner's
``is_correct`` minus base refines'. SFT then RL against RL alone (``sft.compare_sft_then_rl``) is reported
with its paired interval and decides nothing: it is the question the comparison asks, not a check.

Pure functions over the training metrics (``TRAINING_METRICS_SCHEMA``) and the evaluation's per-task
table (``RUN_TASK_METRICS_SCHEMA``), so the benchmark that runs several seeds shares them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import polars as pl

from arc_pipeline.evaluation.bootstrap import Estimate, paired_bootstrap
from arc_pipeline.evaluation.canary_search import SearchCheck, missed, search_markdown
from arc_pipeline.evaluation.runs import refiner_label

BASE_REFINES_RUN = "refine_base"
RL_REFINER_RUN = "refine_rl"
SFT_REFINER_RUN = "refine_sft"
SFT_RL_REFINER_RUN = "refine_sft_rl"
BASELINE_RUN = "baseline"
# paired differences over the same resampled tasks: name -> (run, minus run)
DIFFERENCES = {
    "gain": (RL_REFINER_RUN, BASE_REFINES_RUN),
    "sft_gain": (SFT_REFINER_RUN, BASE_REFINES_RUN),
    "sft_rl_vs_rl": (SFT_RL_REFINER_RUN, RL_REFINER_RUN),
}


def _ratio(mean: float, first: float) -> float:
    if first <= 0:
        return math.inf if mean > 0 else math.nan
    return mean / first


@dataclass(frozen=True)
class RewardWindows:
    """Mean reward over the first ``window`` share of the logged steps, over every step after it (``later``) and
    over the last ``window`` share.

    The check reads ``later`` over ``first``: one task per step makes a short window's mean a count of which tasks
    it drew (a policy that has settled on one program scores 10 or 1 by the task alone), and ``later`` averages
    the rest of the run (four times the window's steps at the default 20%). The last window guards the end: a
    policy that learned, then collapsed, ends below where it began (measured: benchmarks/README.md, the pinned
    stack's GPU canary)."""

    steps: int
    window: float
    first: float
    later: float
    last: float

    @property
    def ratio(self) -> float:
        """The steps after the first window over the first window."""
        return _ratio(self.later, self.first)

    @property
    def last_ratio(self) -> float:
        """The last window over the first."""
        return _ratio(self.last, self.first)


def reward_curve(metrics: pl.DataFrame, metric: str) -> pl.DataFrame:
    """``step``, ``value`` of one metric, one row per logged step, in step order (nulls dropped)."""
    curve = metrics.filter((pl.col("name") == metric) & pl.col("value").is_not_null()).select("step", "value")
    return curve.unique(subset="step", keep="last").sort("step")


def reward_windows(metrics: pl.DataFrame, metric: str, window: float) -> RewardWindows:
    """The first and last windows of ``metric``; fails naming the metric when too few steps were logged."""
    curve = reward_curve(metrics, metric)
    size = math.ceil(curve.height * window)
    if curve.height < 2 or 2 * size > curve.height:
        raise ValueError(
            f"training metric {metric!r}: {curve.height} logged steps cannot give two disjoint {window:.0%} "
            "windows; train longer or log every step (train.logging_steps: 1)"
        )
    values = curve["value"].to_numpy()
    return RewardWindows(
        steps=curve.height,
        window=window,
        first=float(values[:size].mean()),
        later=float(values[size:].mean()),
        last=float(values[-size:].mean()),
    )


def per_task(tasks: pl.DataFrame, run: str, column: str = "is_correct") -> pl.DataFrame:
    rows = tasks.filter(pl.col("run") == run).select("task_id", pl.col(column).fill_null(0.0).alias(run))
    if rows.height == 0:
        raise ValueError(f"the evaluation's task table has no run {run!r}")
    return rows


def bootstrap_means(
    tasks: pl.DataFrame, runs: list[str], samples: int, seed: int, column: str = "is_correct"
) -> dict[str, Estimate]:
    """Each run's mean ``column`` over tasks, and the paired differences of :data:`DIFFERENCES` whose two runs
    are there (the RL-refiner's gain over base refines, ...), with bootstrap intervals from the same resampled
    tasks for every run; tasks a run lacks count 0."""
    joined = per_task(tasks, runs[0], column)
    for run in runs[1:]:
        joined = joined.join(per_task(tasks, run, column), on="task_id", how="full", coalesce=True)
    joined = joined.fill_null(0.0).sort("task_id")
    values = {run: joined[run].to_numpy() for run in runs}
    for name, (run, minus) in DIFFERENCES.items():
        if run in values and minus in values:
            values[name] = values[run] - values[minus]
    return paired_bootstrap(values, samples, seed)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reward_first: float
    reward_later: float
    reward_last: float
    reward_ratio: float  # later / first
    reward_last_ratio: float  # last / first
    reward_steps: int
    window: float
    heldout_tasks: int
    is_correct: dict[str, dict[str, float]]
    gain: dict[str, float]
    min_reward_ratio: float
    min_is_correct_gain: float
    reasons: list[str]
    min_last_window_ratio: float = 1.0
    sft_gain: dict[str, float] | None = None  # SFT-refiner - base refines, with sft.enabled
    min_sft_gain: float | None = None
    sft_rl_vs_rl: dict[str, float] | None = None  # SFT+RL-refiner - RL-refiner: reported, decides nothing
    search: list[dict] | None = None  # with evaluate.search: a SearchCheck per schedule (canary_search.py)
    min_search_gain: float | None = None

    def to_json(self) -> dict:
        return asdict(self)


def decide(
    windows: RewardWindows,
    estimates: dict[str, Estimate],
    heldout_tasks: int,
    min_reward_ratio: float,
    min_is_correct_gain: float,
    min_sft_gain: float | None = None,
    search: list[SearchCheck] | None = None,
    min_search_gain: float | None = None,
    min_last_window_ratio: float = 1.0,
) -> Verdict:
    """Pass when every threshold is met (the SFT gain's only when the SFT refiner was evaluated, the search's
    only with the search); ``reasons`` names each one missed."""
    reasons = []
    if not windows.ratio >= min_reward_ratio:
        reasons.append(
            f"training reward rose {windows.ratio:.2f}x (first {windows.window:.0%} {windows.first:.3f}, the steps "
            f"after it {windows.later:.3f}), below {min_reward_ratio}x"
        )
    if not windows.last_ratio >= min_last_window_ratio:
        reasons.append(
            f"training reward ended at {windows.last_ratio:.2f}x its start (last {windows.window:.0%} "
            f"{windows.last:.3f}, first {windows.first:.3f}), below {min_last_window_ratio}x: the policy collapsed"
        )
    gain = estimates["gain"]
    if not gain.mean >= min_is_correct_gain:
        reasons.append(
            f"RL-refiner is_correct {gain.mean * 100:+.1f} points over base refines, below "
            f"{min_is_correct_gain * 100:+.1f}"
        )
    sft_gain = estimates.get("sft_gain")
    if sft_gain is not None and min_sft_gain is not None and not sft_gain.mean >= min_sft_gain:
        reasons.append(
            f"SFT-refiner is_correct {sft_gain.mean * 100:+.1f} points over base refines, below "
            f"{min_sft_gain * 100:+.1f}"
        )
    if search and min_search_gain is not None:
        reasons += missed(search, min_search_gain)
    sft_rl_vs_rl = estimates.get("sft_rl_vs_rl")
    return Verdict(
        passed=not reasons,
        reward_first=windows.first,
        reward_later=windows.later,
        reward_last=windows.last,
        reward_ratio=windows.ratio,
        reward_last_ratio=windows.last_ratio,
        reward_steps=windows.steps,
        window=windows.window,
        heldout_tasks=heldout_tasks,
        is_correct={run: asdict(estimate) for run, estimate in estimates.items() if run not in DIFFERENCES},
        gain=asdict(gain),
        min_reward_ratio=min_reward_ratio,
        min_is_correct_gain=min_is_correct_gain,
        reasons=reasons,
        min_last_window_ratio=min_last_window_ratio,
        sft_gain=None if sft_gain is None else asdict(sft_gain),
        min_sft_gain=None if sft_gain is None else min_sft_gain,
        sft_rl_vs_rl=None if sft_rl_vs_rl is None else asdict(sft_rl_vs_rl),
        search=[asdict(check) for check in search] if search else None,
        min_search_gain=min_search_gain if search else None,
    )


RUN_LABELS = {BASELINE_RUN: "base", BASE_REFINES_RUN: "base refines", RL_REFINER_RUN: "RL-refiner"}
VERDICT_RUNS = (BASELINE_RUN, BASE_REFINES_RUN, RL_REFINER_RUN)


def verdict_runs(tasks: pl.DataFrame) -> list[str]:
    """The runs of the verdict table: baseline, base refines and the RL-refiner (the verdict's), then every other
    run of the evaluation (sft, sft_rl, extra adapters) in its order, estimated alike for comparison."""
    others = [run for run in tasks["run"].unique(maintain_order=True).to_list() if run not in VERDICT_RUNS]
    return [*VERDICT_RUNS, *others]


def run_label(run: str) -> str:
    """A run's row label: the evaluation's label of its refiner (refine_sft: SFT-refiner), else its id."""
    return RUN_LABELS.get(run) or (refiner_label(run.removeprefix("refine_")) if run.startswith("refine_") else run)


def verdict_markdown(verdict: Verdict, metric: str) -> str:
    def interval(estimate: dict[str, float]) -> str:
        return f"{estimate['mean'] * 100:.1f}% [{estimate['low'] * 100:.1f}, {estimate['high'] * 100:.1f}]"

    def points(estimate: dict[str, float]) -> str:
        return interval(estimate).replace("%", " pts", 1)

    lines = [
        f"# Learning canary: {'PASSED' if verdict.passed else 'FAILED'}",
        "",
        (
            f"Training reward (`{metric}`) over {verdict.reward_steps} logged steps: first {verdict.window:.0%} "
            f"{verdict.reward_first:.3f}, the steps after it {verdict.reward_later:.3f}, ratio "
            f"**{verdict.reward_ratio:.2f}x** (needs {verdict.min_reward_ratio}x); last {verdict.window:.0%} "
            f"{verdict.reward_last:.3f}, {verdict.reward_last_ratio:.2f}x the first (needs "
            f"{verdict.min_last_window_ratio}x: no collapse at the end)."
        ),
        "",
        f"Held-out `is_correct` over {verdict.heldout_tasks} tasks (mean [95% paired bootstrap interval]):",
        "",
        "| run | is_correct |",
        "|---|---:|",
        *(f"| {run_label(run)} | {interval(estimate)} |" for run, estimate in verdict.is_correct.items()),
        f"| **RL-refiner - base refines** | **{points(verdict.gain)}** |",
    ]
    needs = f"Needs a gain of at least {verdict.min_is_correct_gain * 100:.0f} points"
    if verdict.sft_gain is not None:
        lines.append(f"| **SFT-refiner - base refines** | **{points(verdict.sft_gain)}** |")
        if verdict.min_sft_gain is not None:
            rl, sft = verdict.min_is_correct_gain * 100, verdict.min_sft_gain * 100
            needs = f"Needs a gain over base refines of at least {rl:.0f} points (RL-refiner) and {sft:.0f} (SFT)"
    if verdict.sft_rl_vs_rl is not None:
        lines.append(f"| SFT+RL-refiner - RL-refiner (reported, not checked) | {points(verdict.sft_rl_vs_rl)} |")
    lines += ["", needs + "."]
    if verdict.search:
        lines += search_markdown(verdict.search, verdict.min_search_gain)
    if verdict.reasons:
        lines += ["", "Missed:", *(f"- {reason}" for reason in verdict.reasons)]
    return "\n".join(lines) + "\n"


def plot_canary(curve: pl.DataFrame, verdict: Verdict, path) -> None:
    """The training reward per step with its two windows shaded, and is_correct per run with intervals."""
    from arc_pipeline.evaluation.plots import _pyplot, _save

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps, values = curve["step"].to_numpy(), curve["value"].to_numpy()
    left.plot(steps, values, marker=".", linewidth=1)
    size = math.ceil(len(steps) * verdict.window)
    for part, mean in ((steps[:size], verdict.reward_first), (steps[-size:], verdict.reward_last)):
        left.axvspan(part[0], part[-1], alpha=0.15)
        left.hlines(mean, part[0], part[-1], colors="black", linestyles="dashed")
    left.hlines(verdict.reward_later, steps[size], steps[-1], colors="tab:red", linestyles="dotted")
    left.set(xlabel="optimizer step", ylabel="mean ARC reward", title=f"training reward ({verdict.reward_ratio:.2f}x)")
    runs = list(verdict.is_correct)
    means = [verdict.is_correct[run]["mean"] * 100 for run in runs]
    errors = [
        [(verdict.is_correct[run]["mean"] - verdict.is_correct[run]["low"]) * 100 for run in runs],
        [(verdict.is_correct[run]["high"] - verdict.is_correct[run]["mean"]) * 100 for run in runs],
    ]
    right.bar([run_label(run) for run in runs], means, yerr=errors, capsize=6)
    right.set(ylabel="is_correct (%)", ylim=(0, 100), title=f"held-out tasks ({verdict.heldout_tasks}), 95% CI")
    fig.suptitle(f"learning canary: {'PASSED' if verdict.passed else 'FAILED'}")
    _save(fig, path)
    plt.close(fig)
