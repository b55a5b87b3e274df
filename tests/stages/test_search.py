"""The search in rounds on hand-made parquets (evaluation_helpers): a round's prompts refine the best wrong program
found so far (search-prompts), and the search's table matches the one-round table where they are the same run."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.cli import main as cli_main
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, PREDICTIONS_SCHEMA, REFINEMENT_SCHEMA, SEARCH_SCHEMA
from arc_pipeline.scoring.execution import executions_frame
from tests.evaluation import evaluation_helpers as data
from tests.generation.inference_helpers import build_untrained_tiny_model, write_tasks

FEEDBACK_WORDS = ("Execution output", "pixel similarity")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("model")  # only its tokenizer is read
    return build_untrained_tiny_model(
        write_tasks(data.tasks(), folder / "tasks.parquet"), folder / "tiny", vocab_size=600
    )


def round_one(folder: Path, b_refinement_train: tuple = (0.75, 0.5)) -> dict[str, Path]:
    """Round 1 of refiner rl: on B a wrong refinement better on train (0.75, 0.5) than B's initial answers
    (0.25, 0.0), or as ``b_refinement_train`` says; on A a timeout and a right answer, so A's best wrong program
    stays the initial a1."""
    predictions = data.prediction_frame(
        [data.prediction(t, 2, 0, s, parent=data.PARENTS[t]) for t in ("A", "B") for s in (0, 1)]
    )
    executions = executions_frame(
        [
            data.execution("A/t2/r0/s0", error="TimeoutException"),
            data.execution("A/t2/r0/s1", fp="ra1", train=(1.0, 1.0), test=(1.0, 1.0)),
            data.execution("B/t2/r0/s0", fp="rb0", train=b_refinement_train, test=(0.0, 0.0)),
            data.execution("B/t2/r0/s1", error="UnsafeCode"),
        ]
    )
    paths = {"predictions": folder / "r1" / "predictions.parquet", "executions": folder / "r1" / "executions.parquet"}
    write_table(predictions, paths["predictions"], PREDICTIONS_SCHEMA)
    write_table(executions, paths["executions"], EXECUTIONS_SCHEMA)
    return paths


def search_prompts(paths: dict, earlier: dict | None, model: Path, output: Path, **config) -> pl.DataFrame:
    rounds = [earlier] if earlier else []
    status = cli_main(
        [
            "search-prompts",
            "--tasks",
            str(paths["tasks"]),
            "--predictions",
            str(paths["baseline_predictions"]),
            "--executions",
            str(paths["baseline"]),
            "--initial",
            "2",
            "--earlier-predictions",
            *(str(r["predictions"]) for r in rounds),
            "--earlier-executions",
            *(str(r["executions"]) for r in rounds),
            "--model",
            str(model),
            "--output",
            str(output),
            "--config-json",
            json.dumps({"round": len(rounds) + 1, "max_model_len": 100_000, "max_tokens": 10, **config}),
        ]
    )
    assert status == 0
    return read_frame(output, REFINEMENT_SCHEMA)


def test_a_round_refines_the_best_wrong_program_found_so_far(tiny_model, tmp_path, capfd):
    paths = data.write_inputs(tmp_path)
    first = search_prompts(paths, None, tiny_model, tmp_path / "p1.parquet", refinement_prompts=1)
    # round 1 is refine-prompts' own choice over the first half: each task's best wrong initial answer
    assert dict(zip(first["task_id"], first["prediction_id"])) == data.PARENTS
    second = search_prompts(paths, round_one(tmp_path), tiny_model, tmp_path / "p2.parquet", refinement_prompts=2)
    by_task = second.group_by("task_id", maintain_order=True).agg("prediction_id", "previous_train_correct_grids")
    chosen = {row["task_id"]: row for row in by_task.iter_rows(named=True)}
    # B: the round-1 refinement first (better on train), then the initial b1; A: its initial a1 (round 1 timed out)
    assert chosen["B"]["prediction_id"] == ["B/t2/r0/s0", "B/t1/r0/s0"]
    assert chosen["B"]["previous_train_correct_grids"] == [0.5, 0.0]
    assert chosen["A"]["prediction_id"] == ["A/t1/r0/s0", "A/t1/r0/s0"]
    assert all(word in prompt for prompt in second["prompt"] for word in FEEDBACK_WORDS)
    # round 1 refined a1 and b1 already: A's two prompts and B's second repeat round 1's prompts
    [logged] = [line for line in capfd.readouterr().err.splitlines() if "search prompts: round 2" in line]
    assert logged.endswith("parents_refined_before 3")


def test_best_unrefined_refines_a_new_program_before_an_old_one_again(tiny_model, tmp_path, capfd):
    """B's round-1 refinement is worse on train than its parent: best_wrong sends the parent's prompt again,
    best_unrefined the refinement's; A made nothing new to refine, so both send its parent's prompt again."""
    paths = data.write_inputs(tmp_path)
    earlier = round_one(tmp_path, b_refinement_train=(0.2, 0.0))
    again = search_prompts(paths, earlier, tiny_model, tmp_path / "again.parquet", refinement_prompts=1)
    fresh = search_prompts(
        paths, earlier, tiny_model, tmp_path / "fresh.parquet", refinement_prompts=1, parents="best_unrefined"
    )
    assert dict(zip(again["task_id"], again["prediction_id"])) == {"A": "A/t1/r0/s0", "B": "B/t1/r0/s0"}
    assert dict(zip(fresh["task_id"], fresh["prediction_id"])) == {"A": "A/t1/r0/s0", "B": "B/t2/r0/s0"}
    logged = [line for line in capfd.readouterr().err.splitlines() if "search prompts: round 2" in line]
    assert [line.rsplit(" ", 1)[-1] for line in logged] == ["2", "1"]  # parents_refined_before


def test_the_mutation_refines_random_programs_without_feedback(tiny_model, tmp_path):
    paths = data.write_inputs(tmp_path)
    earlier = round_one(tmp_path)
    mutated = {"refinement_prompts": 6, "parents": "random", "feedback": False, "seed": 3}
    drawn = search_prompts(paths, earlier, tiny_model, tmp_path / "m.parquet", **mutated)
    again = search_prompts(paths, earlier, tiny_model, tmp_path / "m2.parquet", **mutated)
    assert drawn["prediction_id"].to_list() == again["prediction_id"].to_list()  # seeded
    assert not any(word in prompt for prompt in drawn["prompt"] for word in FEEDBACK_WORDS)
    # any program so far with valid outputs (the first 2 initial ones and round 1), right ones too: A's right
    # refinement is never a best-wrong parent
    valid = {"A/t1/r0/s0", "A/t2/r0/s1", "B/t1/r0/s0", "B/t1/r0/s1", "B/t2/r0/s0"}
    assert set(drawn["prediction_id"]) <= valid and drawn.height == 12
    assert "A/t2/r0/s1" in set(drawn["prediction_id"])


def test_the_one_round_point_is_the_evaluation_tables_run(tmp_path):
    """A schedule whose round 1 is the one-round run gives that run's is_correct (runs.md); independent sampling at
    the same budget is the baseline's first predictions; the gain is their paired difference."""
    paths = data.write_inputs(tmp_path)
    runs = tmp_path / "report"
    common = ["--tasks", str(paths["tasks"]), "--baseline-predictions", str(paths["baseline_predictions"])]
    common += ["--baseline", str(paths["baseline"])]
    assert (
        cli_main(
            [
                "evaluate",
                *common,
                "--refiners",
                "base",
                "rl",
                "--refinement-predictions",
                str(paths["base_predictions"]),
                str(paths["rl_predictions"]),
                "--refinements",
                str(paths["base"]),
                str(paths["rl"]),
                "--output-dir",
                str(runs),
                "--config-json",
                json.dumps({"n_eval": data.N_EVAL}),
            ]
        )
        == 0
    )
    rounds = [f"base:2+4:{paths['base']}", f"rl:2+4:{paths['rl']}"]
    config = json.dumps({"enabled": True, "schedules": [[2, 4]]})
    assert cli_main(["search", *common, "--rounds", *rounds, "--output-dir", str(runs), "--config-json", config]) == 0
    summary = read_frame(runs / "search.parquet", SEARCH_SCHEMA)
    table = pl.read_parquet(runs / "runs.parquet")
    for refiner, run in (("rl", "refine_rl"), ("base", "refine_base")):
        point = summary.filter((pl.col("refiner") == refiner) & (pl.col("round") == 1)).row(0, named=True)
        assert point["predictions"] == 6
        assert point["is_correct"] == pytest.approx(table.filter(pl.col("run") == run)["is_correct"][0])
    # independent sampling at 2 predictions is the first half (A's and B's first two are wrong); at 6, all 4: A's
    # a2 is right, B's b2 right on test only
    independent = dict(summary.filter(pl.col("refiner").is_null()).select("predictions", "is_correct").iter_rows())
    assert independent == {2: 0.0, 6: 0.5}
    rl = summary.filter((pl.col("refiner") == "rl") & (pl.col("round") == 1)).row(0, named=True)
    assert rl["gain_over_independent"] == pytest.approx(rl["is_correct"] - independent[6])
    markdown = (runs / "search.md").read_text()
    assert "## Schedule 2+4: is_correct" in markdown and "| RL-refiner |" in markdown
    assert (runs / "search.png").stat().st_size > 0 and (runs / "search_tasks.parquet").is_file()
    # what each round added, as (distinct new outputs, predictions): the start holds a1 for A and b1 twice for B;
    # rl's refinements give ra1 twice and ra2 for A, rb1 for B; base refines repeat A's a1 and write no code for B;
    # independent sampling's next 2 per task give a2 and b2
    explored = {
        (row["refiner"], row["predictions"]): (row["new_outputs"], row["round_predictions"])
        for row in summary.iter_rows(named=True)
    }
    assert explored == {(None, 2): (2, 4), (None, 6): (2, 4), ("base", 2): (2, 4), ("rl", 2): (2, 4)} | {
        ("rl", 6): (3, 8),
        ("base", 6): (0, 8),
    }
    assert "| base refines | 2 of 4 (50%) | 0 of 8 (0%) |" in markdown


def test_a_round_missing_from_the_rounds_is_named(tmp_path, capsys):
    paths = data.write_inputs(tmp_path)
    args = ["search", "--tasks", str(paths["tasks"]), "--baseline-predictions", str(paths["baseline_predictions"])]
    args += ["--baseline", str(paths["baseline"]), "--rounds", f"rl:2+4:{paths['rl']}", "--output-dir", str(tmp_path)]
    config = json.dumps({"enabled": True, "schedules": [[2, 4, 4]]})
    assert cli_main([*args, "--config-json", config]) == 1
    assert "no executions for round 2 of schedule 2+4+4 (2+4+4)" in capsys.readouterr().err
