"""How often can each held-out check of the learning canary fail a refiner that learned, or pass one that did not?

The canary's held-out checks (docs/canary.md) compare, on a preset's ``arc_tasks.canary.tasks`` tasks, a refiner's
``is_correct`` with base refines' and pass when the mean gain reaches the check's margin. Their refiners answer one
of the family's programs whatever the prompt says, so each check's sampling error follows from the preset alone:

- the held-out tasks are the preset's own (``arc_tasks.canary``, drawn as the workflow draws them), each
  solved by one program;
- the base model answers ``t`` with its warm-up weights (``model.<source>.warmup_canary_weights``, else uniformly);
- a refiner that learned answers the family's most common program with probability ``learned``, else as the base
  model does; a refiner that learned nothing answers as the base model does;
- the one-round checks (RL and SFT) share the first ``n_eval // 2`` predictions and then refine each task once
  per refinement sample (``evaluate.refinement_prompts x inference.n``); the search check shares the schedule's
  first independent predictions and then spends the rest of its budget on refinements, round after round;
- a learned refiner's later rounds either draw afresh (``fresh``) or repeat its first round's answer
  (``repeats``: a collapsed policy shown the same best wrong program again, as the GPU canary's RL-refiner on
  vLLM 0.31, benchmarks/README.md); base refines always draws afresh.

For each check the script draws many evaluations of those tasks and prints the expected gain, its spread, and the
share of evaluations in which a learned refiner misses the margin or a refiner that learned nothing reaches it:

    python benchmarks/canary_power.py --configfile config/canary-gpu.yaml
    python benchmarks/canary_power.py --configfile config/canary-gpu.yaml --tasks 200 --min-search-gain 0.10

It runs no model: the canary's own runs are in benchmarks/README.md, and this table says how far one run's
figures may be from what its refiners can do.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from arc_pipeline.config.prepare import deep_merge, prepare_config
from arc_pipeline.domain.canary import CANARY_PROGRAMS, canary_examples

REPO = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("canary_power")


@dataclass(frozen=True)
class CheckDesign:
    """One held-out check: predictions shared by both sides, then each side's own, and the margin to reach."""

    name: str
    shared: int  # the base model's predictions both sides start from
    own: int  # the refiner's (or base refines') predictions after them
    margin: float
    rounds: int = 1  # refinement rounds the own predictions are spread over


@dataclass(frozen=True)
class Family:
    """The held-out tasks and the base model's guesses, over the same programs."""

    programs: tuple[str, ...]
    task_weights: np.ndarray  # the family's weights: which program a drawn task needs
    base_answers: np.ndarray  # which program the base model answers
    needed: np.ndarray  # the program each held-out task needs (an index into programs)

    @property
    def majority(self) -> int:
        return int(np.argmax(self.task_weights))

    def refiner_answers(self, learned: float) -> np.ndarray:
        """A refiner that answers the majority program with probability ``learned``, else as the base model."""
        answers = (1 - learned) * self.base_answers
        answers[self.majority] += learned
        return answers


@dataclass(frozen=True)
class CheckPower:
    """One check against one kind of learned refiner, over many simulated evaluations."""

    name: str
    margin: float
    learned: float
    later_rounds: str  # "fresh" or "repeats"
    expected_gain: float  # closed form
    gain_sd: float  # over draws of the evaluation
    fail_if_learned: float  # share of draws below the margin
    pass_if_nothing: float  # share of draws of a refiner that learned nothing at or above the margin


def normalised(weights: dict[str, float], programs: tuple[str, ...]) -> np.ndarray:
    values = np.array([float(weights.get(name, 0.0)) for name in programs])
    return values / values.sum()


def preset_design(configfile: Path, overrides: dict) -> tuple[Family, list[CheckDesign]]:
    """The held-out tasks, the base model's guesses and the held-out checks of a preset (``overrides`` merged
    in)."""
    raw = deep_merge(yaml.safe_load(configfile.read_text()), overrides)
    workflow = prepare_config(raw, {}, REPO, [str(configfile)])
    programs = tuple(CANARY_PROGRAMS)
    source = getattr(workflow.model, workflow.model.source, None)
    warmup = getattr(source, "warmup_canary_weights", None) or dict.fromkeys(programs, 1.0)
    canary_tasks = workflow.arc_tasks.canary
    needed = np.array([programs.index(name) for name, _ in canary_examples(canary_tasks)])
    family = Family(programs, normalised(canary_tasks.programs, programs), normalised(warmup, programs), needed)
    first_half = workflow.evaluate.n_eval // 2
    refinements = workflow.evaluate.refinement_prompts * workflow.inference.n
    checks = [CheckDesign("RL-refiner - base refines", first_half, refinements, workflow.canary.min_is_correct_gain)]
    if workflow.sft.enabled:
        checks.append(CheckDesign("SFT-refiner - base refines", first_half, refinements, workflow.canary.min_sft_gain))
    if workflow.evaluate.search.enabled:
        for schedule in workflow.evaluate.search.schedules:
            label = "+".join(map(str, schedule))
            checks.append(
                CheckDesign(
                    f"search {label}: RL - base refines",
                    schedule[0],
                    sum(schedule[1:]),
                    workflow.canary.min_search_gain,
                    rounds=len(schedule) - 1,
                )
            )
    return family, checks


def expected_is_correct(family: Family, shared: int, own: int, own_answers: np.ndarray) -> float:
    """Expected share of the held-out tasks some prediction solves: ``shared`` base answers, then ``own``
    answers drawn from ``own_answers``."""
    unsolved = (1 - family.base_answers) ** shared * (1 - own_answers) ** own
    return float((1 - unsolved)[family.needed].mean())


def refiner_predictions(check: CheckDesign, later_rounds: str) -> int:
    """The refiner's own predictions that can solve a task: a refiner that repeats itself has only its first
    round's."""
    if later_rounds == "repeats":
        return check.own // check.rounds
    return check.own


def draw_gains(
    family: Family,
    check: CheckDesign,
    refiner: np.ndarray,
    draws: int,
    rng: np.random.Generator,
    later_rounds: str = "fresh",
) -> np.ndarray:
    """The check's mean gain (refiner minus base refines) in each of ``draws`` simulated evaluations."""
    # a task's chance that one answer solves it, per side
    base_hit = family.base_answers[family.needed]
    refiner_hit = refiner[family.needed]
    tasks = len(family.needed)
    shared_solved = rng.random((draws, tasks)) < 1 - (1 - base_hit) ** check.shared
    own = refiner_predictions(check, later_rounds)
    refiner_solved = shared_solved | (rng.random((draws, tasks)) < 1 - (1 - refiner_hit) ** own)
    base_solved = shared_solved | (rng.random((draws, tasks)) < 1 - (1 - base_hit) ** check.own)
    return (refiner_solved.astype(float) - base_solved).mean(axis=1)


def check_power(
    family: Family,
    check: CheckDesign,
    learned: float,
    draws: int,
    seed: int,
    later_rounds: str = "fresh",
) -> CheckPower:
    """The check's expected gain for a refiner that answers the majority with probability ``learned``, and how
    often it misses the margin, or a refiner that learned nothing reaches it, over ``draws`` evaluations."""
    rng = np.random.default_rng(seed)
    refiner = family.refiner_answers(learned)
    gains = draw_gains(family, check, refiner, draws, rng, later_rounds)
    nothing = draw_gains(family, check, family.base_answers, draws, rng)
    own = refiner_predictions(check, later_rounds)
    expected = expected_is_correct(family, check.shared, own, refiner) - expected_is_correct(
        family, check.shared, check.own, family.base_answers
    )
    return CheckPower(
        name=check.name,
        margin=check.margin,
        learned=learned,
        later_rounds=later_rounds,
        expected_gain=expected,
        gain_sd=float(gains.std()),
        fail_if_learned=float((~reaches(gains, check.margin)).mean()),
        pass_if_nothing=float(reaches(nothing, check.margin).mean()),
    )


def reaches(gains: np.ndarray, margin: float) -> np.ndarray:
    """Which mean gains reach the margin: 15 tasks of 100 reach 0.15, though 15/100 may land a float below it."""
    return gains >= margin - 1e-12


def table(rows: list[CheckPower], tasks: int) -> str:
    header = (
        f"| check ({tasks} tasks) | margin | refiner answers the majority | later rounds | expected gain | sd | "
        "fails a refiner that learned | passes one that learned nothing |"
    )
    lines = [header, "|---|---:|---:|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.margin * 100:+.0f} pts | {row.learned:.0%} | {row.later_rounds} | "
            f"{row.expected_gain * 100:+.1f} pts | "
            f"{row.gain_sd * 100:.1f} pts | {row.fail_if_learned:.1%} | {row.pass_if_nothing:.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", type=Path, required=True, help="a canary preset, e.g. config/canary-gpu.yaml")
    parser.add_argument("--tasks", type=int, help="held-out tasks instead of the preset's arc_tasks.canary.tasks")
    parser.add_argument("--min-search-gain", type=float, help="the search check's margin instead of the preset's")
    parser.add_argument(
        "--learned",
        default="1.0,0.75",
        help="comma-separated shares of a learned refiner's answers that are the majority program",
    )
    parser.add_argument("--draws", type=int, default=20000, help="simulated evaluations per check")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    overrides: dict = {}
    if args.tasks:
        overrides["arc_tasks"] = {"canary": {"tasks": args.tasks}}
    if args.min_search_gain is not None:
        overrides["canary"] = {"min_search_gain": args.min_search_gain}
    family, checks = preset_design(args.configfile, overrides)
    rows = [
        check_power(family, check, float(learned), args.draws, args.seed, later_rounds)
        for check in checks
        for learned in args.learned.split(",")
        for later_rounds in (("fresh", "repeats") if check.rounds > 1 else ("fresh",))
    ]
    counts = np.bincount(family.needed, minlength=len(family.programs))
    LOG.info(
        "%s: the %d held-out tasks need %s; the base model answers %s",
        args.configfile,
        len(family.needed),
        dict(zip(family.programs, counts.tolist())),
        dict(zip(family.programs, family.base_answers.round(3).tolist())),
    )
    LOG.info("%s", table(rows, len(family.needed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
