"""benchmarks/canary_power.py: the canary's held-out checks as sampling, against their closed form, and the
presets' margins against a refiner that learned the majority program and one that learned nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.benchmark_scripts import load_benchmark

REPO = Path(__file__).resolve().parents[1]
canary_power = load_benchmark("canary_power")

DRAWS = 4000


@pytest.fixture(scope="module")
def gpu_preset():
    return canary_power.preset_design(REPO / "config" / "canary-gpu.yaml", {})


def test_the_draws_agree_with_the_closed_form(gpu_preset) -> None:
    family, checks = gpu_preset
    search = next(check for check in checks if check.rounds > 1)
    for learned, later_rounds in ((1.0, "fresh"), (0.7, "fresh"), (0.7, "repeats"), (0.0, "fresh")):
        power = canary_power.check_power(family, search, learned, DRAWS, seed=1, later_rounds=later_rounds)
        gains = canary_power.draw_gains(
            family, search, family.refiner_answers(learned), DRAWS, canary_power.np.random.default_rng(2), later_rounds
        )
        assert abs(gains.mean() - power.expected_gain) < 5 * power.gain_sd / math.sqrt(DRAWS)
    # nothing learned: the same answers on both sides, no gain to expect
    nothing = canary_power.check_power(family, search, 0.0, DRAWS, seed=1)
    assert nothing.expected_gain == 0.0


def test_a_refiner_that_repeats_itself_gains_only_its_first_round(gpu_preset) -> None:
    family, checks = gpu_preset
    search = next(check for check in checks if check.rounds > 1)
    one_round = next(check for check in checks if check.name.startswith("RL-refiner"))
    repeats = canary_power.check_power(family, search, 0.7, DRAWS, seed=0, later_rounds="repeats")
    fresh = canary_power.check_power(family, search, 0.7, DRAWS, seed=0, later_rounds="fresh")
    refiner = family.refiner_answers(0.7)
    # its search holds what its one-round refinement holds, while base refines keeps drawing
    assert canary_power.expected_is_correct(family, search.shared, 1, refiner) == pytest.approx(
        canary_power.expected_is_correct(family, one_round.shared, one_round.own, refiner)
    )
    assert repeats.expected_gain < fresh.expected_gain - 0.05


@pytest.mark.parametrize("preset", ["canary.yaml", "canary-gpu.yaml"])
def test_each_presets_margins_separate_learning_from_none(preset) -> None:
    """A refiner that answers the majority program misses no check more often than 1 time in 40, and one that
    learned nothing reaches none more often than that (the held-out tasks the preset draws)."""
    family, checks = canary_power.preset_design(REPO / "config" / preset, {})
    assert {check.name.split(":")[0].split(" - ")[0] for check in checks} >= {"RL-refiner", "SFT-refiner"}
    for check in checks:
        power = canary_power.check_power(family, check, 1.0, DRAWS, seed=0)
        assert power.fail_if_learned <= 0.025, (preset, power)
        assert power.pass_if_nothing <= 0.025, (preset, power)
