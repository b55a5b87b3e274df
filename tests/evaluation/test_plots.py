"""The pass@k figure's y axis: percent from 0 (never negative), capped at 100."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.evaluation.plots import percent_limits, plot_pass_at_k


@pytest.mark.parametrize(("fractions", "limits"), [
    ([0.0, 0.0], (0.0, 5.0)),          # nothing solved: no negative axis
    ([0.1, 0.4], (0.0, 44.0)),
    ([0.5, 1.0], (0.0, 100.0)),
])
def test_percent_limits(fractions: list[float], limits: tuple[float, float]) -> None:
    assert percent_limits(fractions) == pytest.approx(limits)


def test_all_zero_curve_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.axes

    seen: list[tuple[float, float]] = []
    original = matplotlib.axes.Axes.set_ylim

    def record(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        seen.append(self.get_ylim())
        return result

    monkeypatch.setattr(matplotlib.axes.Axes, "set_ylim", record)
    curves = pl.DataFrame({"run": ["baseline"] * 3, "model": ["base"] * 3, "k": [1, 2, 4],
                           "pass_at_k": [0.0, 0.0, 0.0]})
    path = plot_pass_at_k(curves, tmp_path / "passk.png")
    assert path.stat().st_size > 0
    assert seen and seen[-1][0] == 0.0 and seen[-1][1] == 5.0
