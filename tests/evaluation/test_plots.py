"""The pass@k figure's y axis: percent from 0 (never negative), capped at 100."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.evaluation.plots import percent_limits, plot_pass_at_k


@pytest.mark.parametrize(
    ("fractions", "limits"),
    [
        ([0.0, 0.0], (0.0, 5.0)),  # nothing solved: no negative axis
        ([0.1, 0.4], (0.0, 44.0)),
        ([0.5, 1.0], (0.0, 100.0)),
    ],
)
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
    curves = pl.DataFrame(
        {"run": ["baseline"] * 3, "model": ["base"] * 3, "k": [1, 2, 4], "pass_at_k": [0.0, 0.0, 0.0]}
    )
    path = plot_pass_at_k(curves, tmp_path / "passk.png")
    assert path.stat().st_size > 0
    assert seen and seen[-1][0] == 0.0 and seen[-1][1] == 5.0


def _execution(
    task_id: str, prediction_id: str, pixel: float | None, train_ok: bool, test_ok: bool, error: str | None = None
) -> dict:
    return {
        "task_id": task_id,
        "prediction_id": prediction_id,
        "error_type": error,
        "test_pixel_score": pixel,
        "train_is_correct": train_ok,
        "test_is_correct": test_ok,
        "test_outputs": None if error else [[[int(100 * (pixel or 0)) % 10]]],
    }


def test_example_rows_pick_solved_tasks_and_the_closest_near_misses(tmp_path: Path) -> None:
    from arc_pipeline.evaluation.plots import example_rows

    executions = pl.DataFrame(
        [
            _execution("S", "S/2", 1.0, True, True),
            _execution("S", "S/1", 0.4, False, False),
            _execution("T", "T/1", 1.0, False, True),  # right on test, wrong on train: not solved
            _execution("N", "N/1", 0.5, False, False),
            _execution("N", "N/2", 0.9, False, False),
            _execution("M", "M/1", 0.7, False, False),
            _execution("E", "E/1", None, False, False, error="ZeroDivisionError"),  # no output to draw
            _execution("Z", "Z/1", 0.0, False, False),  # nothing right: no near miss
            _execution("U", "U/1", 1.0, True, True),  # test solution unknown: never shown
        ]
    )
    known = {"S": True, "T": True, "N": True, "M": True, "E": True, "Z": True, "U": False}
    rows = example_rows(executions, known, per_kind=2)
    assert rows.select("kind", "task_id", "test_pixel_score").rows() == [
        ("solved", "S", 1.0),
        ("near miss", "T", 1.0),
        ("near miss", "N", 0.9),
    ]
    assert example_rows(executions, known, per_kind=1)["task_id"].to_list() == ["S", "T"]
