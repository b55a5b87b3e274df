"""The learning canary through the real workflow: config/canary.yaml itself (docs/canary.md), ~10 min on 2 cores.

Real vLLM on CPU, real TRL, the real sandboxed reward: the tiny model must learn from the ARC reward alone
which answers pay, and its adapter must carry that to held-out tasks. This is the test that fails when the
advantages' sign, the reward's frame or the adapter's loading at evaluation is wrong.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.workflow.conftest import REPO, Workflow, in_a_worker, start_in_the_background

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def canary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    # Beside it, the session's waiting work: in two workers (`make test`) the Slurm run goes with the local run in
    # the other worker (tests/conftest.py); in one process with the canary, the session's first test.
    start_in_the_background(request, "cluster_set_resolution", *([] if in_a_worker() else ["slurm_run_started"]))
    # The preset as it is (fewer training steps or tasks learn too little to pass, and the evaluation is cheap),
    # but for its second GRPO job: SFT then RL is a comparison, not a check, and would add 5 minutes of CPU; and the
    # search runs for the two refiners its check compares (the SFT-refiner's would add half a minute of CPU).
    config = yaml.safe_load((REPO / "config" / "canary.yaml").read_text())
    config["results_dir"] = "results"
    config["sft"]["compare_sft_then_rl"] = False
    config["evaluate"]["search"]["refiners"] = ["base", "rl"]
    # One thread per GPU-rule job instead of the preset's 8 (capped at the 2 cores), so that Snakemake runs the
    # DAG's independent model jobs side by side (the SFT branch beside `train`, the two searches together) rather
    # than one after the other; a job mostly had one core anyway, the other worker's tests taking the other
    # (docs/testing.md). Thread counts change the arithmetic's rounding only, which the checks' margins allow.
    config.setdefault("cluster", {}).setdefault("gpu", {})["threads"] = 1
    workflow = Workflow(tmp_path_factory.mktemp("canary"), config)
    # 27 minutes on a 2-core AVX2 machine beside the other worker: the default 30-minute guard was too close
    workflow.snakemake(timeout=3600)
    return workflow


def test_learning_happened(canary: Workflow) -> None:
    """The reward rose and the adapter carries it to held-out tasks, with a margin that a different CPU's
    arithmetic cannot erase: the preset's own thresholds (1.5x, +15 points) are the verdict's, and the
    benchmark's three seeds met them 3 of 3 times (benchmarks/README.md)."""
    verdict = json.loads(canary.path("canary/verdict.json").read_text())
    summary = canary.path("canary/verdict.md").read_text()
    assert verdict["reward_ratio"] >= 1.25, summary
    assert verdict["gain"]["low"] > 0, summary  # the 95% interval of RL-refiner - base refines excludes 0
    assert verdict["gain"]["mean"] >= 0.10, summary
    assert verdict["heldout_tasks"] == canary.config["arc_tasks"]["canary"]["tasks"]


def test_the_sft_refiner_learned_from_the_models_own_solves(canary: Workflow) -> None:
    """The short SFT path end to end: the base model's sampled refinements, the solving ones kept, a LoRA
    trained on them, its evaluation row. It must beat base refines as the RL-refiner does, with the same
    margin below the preset's threshold (+15) against another CPU's arithmetic."""
    import polars as pl

    verdict = json.loads(canary.path("canary/verdict.json").read_text())
    summary = canary.path("canary/verdict.md").read_text()
    assert verdict["sft_gain"]["low"] > 0, summary
    assert verdict["sft_gain"]["mean"] >= 0.10, summary
    counts = json.loads(canary.path("sft_dataset/summary.json").read_text())
    assert 0 < counts["kept"] <= counts["solved"] and counts["prompts_with_success"] > 10, counts
    predictions = pl.read_parquet(canary.path("evaluate/refine_sft/predictions.parquet"))
    assert predictions["adapter"].null_count() == 0 and predictions["adapter"].n_unique() == 1
    assert predictions["adapter"][0].endswith("sft/adapter")
    assert "refine_sft_rl" not in verdict["is_correct"]  # switched off above


def test_first_turn_guesses_as_the_canary_says(canary: Workflow) -> None:
    """The base model solves some tasks and misses most: 5-40% of first-turn predictions are right (about
    one in eight by the preset's warm-up weights; 8.6-13.3% over the benchmark's three seeds)."""
    import polars as pl

    executions = pl.read_parquet(canary.path("execute/barc/part1.parquet"))
    solved = executions.filter(pl.col("train_correct_grids") == 1).height / executions.height
    assert 0.05 <= solved <= 0.40
    assert executions["error_type"].null_count() / executions.height > 0.9  # the answers are valid programs


def test_the_rl_refiner_used_its_adapter(canary: Workflow) -> None:
    import polars as pl

    predictions = pl.read_parquet(canary.path("evaluate/refine_rl/predictions.parquet"))
    assert predictions["adapter"].drop_nulls().n_unique() == 1
    assert predictions["adapter"].null_count() == 0


def test_the_rl_refiners_search_beats_base_refines_search(canary: Workflow) -> None:
    """The short search (1 independent prediction, then 2 rounds of 1 refinement): round 1 is the one-round table's
    run, round 2 refines the best wrong program of the first two, and at the full budget the RL-refiner's search
    beats base refines' (the preset's margin is the verdict's; the tests ask a little less against another CPU's
    arithmetic, as above)."""
    import polars as pl

    verdict = json.loads(canary.path("canary/verdict.json").read_text())
    summary = canary.path("canary/verdict.md").read_text()
    [check] = verdict["search"]
    assert (check["schedule"], check["rounds"], check["predictions"]) == ("1+1+1", 2, 3)
    assert check["rl_over_base"]["low"] > 0, summary
    assert check["rl_over_base"]["mean"] >= 0.10, summary
    assert set(check["over_independent"]) == {"base refines", "RL-refiner"}

    first = pl.read_parquet(canary.path("evaluate/baseline/predictions.parquet")).filter(pl.col("round") == 0)
    round_one = pl.read_parquet(canary.path("evaluate/refine_rl/predictions.parquet"))
    round_two = pl.read_parquet(canary.path("evaluate/search/rl/1+1+1/predictions.parquet"))
    assert set(round_two["turn"]) == {3} and round_two["adapter"].null_count() == 0
    assert set(round_two["parent_prediction_id"]) <= set(first["prediction_id"]) | set(round_one["prediction_id"])
    # the search's one-round point is the one-round table's row
    points = pl.read_parquet(canary.path("evaluate/report/search.parquet"))
    runs = pl.read_parquet(canary.path("evaluate/report/runs.parquet"))
    one_round = points.filter((pl.col("refiner") == "rl") & (pl.col("round") == 1))["is_correct"][0]
    assert one_round == pytest.approx(runs.filter(pl.col("run") == "refine_rl")["is_correct"][0])


def test_a_new_round_plans_only_its_own_jobs(canary: Workflow) -> None:
    """A second schedule that shares its first round plans its new round for each searching refiner and the
    tables, nothing upstream; an interrupted round (its predictions gone) plans that round again and what reads
    it."""
    schedules = canary.config["evaluate"]["search"]["schedules"]
    canary.config["evaluate"]["search"]["schedules"] = [*schedules, [1, 2]]
    canary.write_config()
    try:
        planned = canary.planned_jobs()
    finally:
        canary.config["evaluate"]["search"]["schedules"] = schedules
        canary.write_config()
    assert {
        rule: planned.get(rule) for rule in ("search_prompts", "search_inference", "search_execute")
    } == dict.fromkeys(("search_prompts", "search_inference", "search_execute"), 2)
    assert set(planned) <= {
        "search_prompts",
        "search_inference",
        "search_execute",
        "search",
        "canary",
        "benchmark_summary",
        "all",
    }

    # another selection (parents: best_unrefined) keeps round 1, the one-round table's run, and redoes round 2
    search = canary.config["evaluate"]["search"]
    parents = search.get("parents", "best_wrong")
    search["parents"] = "best_unrefined"
    canary.write_config()
    try:
        planned = canary.planned_jobs()
    finally:
        search["parents"] = parents
        canary.write_config()
    assert {
        rule: planned.get(rule) for rule in ("search_prompts", "search_inference", "search_execute")
    } == dict.fromkeys(("search_prompts", "search_inference", "search_execute"), 2)
    assert not {"evaluate_refine_prompts", "evaluate_refinement_inference", "evaluate"} & set(planned)

    # interrupted in the RL-refiner's round 2: its prompts written, its inference killed, nothing after it
    gone = [
        canary.path(relative)
        for relative in (
            "evaluate/search/rl/1+1+1/predictions.parquet",
            *(f"evaluate/search/rl/1+1+1/{name}" for name in ("executions.parquet", "metrics.parquet", "metrics.md")),
            *(f"evaluate/search/rl/1+1+1/{name}" for name in ("errors.parquet", "errors.md")),
            *(f"evaluate/report/search{suffix}" for suffix in (".md", ".html", ".parquet", "_tasks.parquet", ".png")),
            *(f"canary/{name}" for name in ("verdict.json", "verdict.md", "canary.png")),
        )
    ]
    aside = canary.workdir / "interrupted"
    aside.mkdir()
    for index, path in enumerate(gone):
        path.rename(aside / str(index))
    try:
        planned = canary.planned_jobs()
    finally:
        for index, path in enumerate(gone):
            (aside / str(index)).rename(path)
    assert {rule: planned.get(rule) for rule in ("search_prompts", "search_inference", "search_execute")} == {
        "search_prompts": None,
        "search_inference": 1,
        "search_execute": 1,
    }
    assert set(planned) <= {"search_inference", "search_execute", "search", "canary", "benchmark_summary", "all"}


def test_inspect_reads_every_rounds_tables(canary: Workflow) -> None:
    import subprocess
    import sys

    for relative in ("evaluate/search/base/1+1+1/executions.parquet", "evaluate/report/search.parquet"):
        shown = subprocess.run(
            [sys.executable, "-m", "arc_pipeline.cli", "inspect", str(canary.path(relative)), "-n", "1"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "rows" in shown and ("prediction_id" in shown or "gain_over_independent" in shown)
