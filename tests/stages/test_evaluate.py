"""The refine-prompts and evaluate commands end to end on small hand-made parquets (evaluation_helpers)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.cli import main as cli_main
from arc_pipeline.io import read_frame, write_table
from arc_pipeline.schemas import (
    EXECUTIONS_SCHEMA,
    REFINEMENT_SCHEMA,
    RUN_KAGGLE_SCHEMA,
    RUN_PASS_AT_K_SCHEMA,
    RUNS_SCHEMA,
    TASKS_SCHEMA,
)
from arc_pipeline.scoring.execution import executions_frame
from arc_pipeline.scoring.submission import read_submission, score_submission
from tests.evaluation import evaluation_helpers as data
from tests.generation.inference_helpers import build_untrained_tiny_model, write_tasks


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    # only its tokenizer is read: the untrained build (the warm-up takes most of a build, and the tokenizer does not
    # depend on it)
    folder = tmp_path_factory.mktemp("model")
    return build_untrained_tiny_model(
        write_tasks(data.tasks(), folder / "tasks.parquet"), folder / "tiny", vocab_size=600
    )


def refine_prompts_status(paths: dict[str, Path], model: Path, output: Path, k: int, first: int = 2, **extra) -> int:
    config = {"refinement_prompts": k, **extra}
    return cli_main(
        [
            "refine-prompts",
            "--tasks",
            str(paths["tasks"]),
            "--predictions",
            str(paths["baseline_predictions"]),
            "--executions",
            str(paths["baseline"]),
            "--model",
            str(model),
            "--first-predictions",
            str(first),
            "--output",
            str(output),
            "--dropped",
            str(output.with_suffix(".dropped.parquet")),
            "--config-json",
            json.dumps(config),
        ]
    )


def refine_prompts(paths: dict[str, Path], model: Path, output: Path, k: int, first: int = 2, **extra) -> pl.DataFrame:
    assert refine_prompts_status(paths, model, output, k, first, **extra) == 0
    return read_frame(output, REFINEMENT_SCHEMA)


def dropped_prompts(output: Path) -> pl.DataFrame:
    return read_frame(output.with_suffix(".dropped.parquet"), REFINEMENT_SCHEMA)


def test_refine_prompts_k_per_task_cycling_distinct_wrong_answers(tiny_model, tmp_path):
    paths = data.write_inputs(tmp_path)
    # give A a second distinct wrong answer in the first half (instead of its timeout), ranked second
    executions = data.baseline_executions().to_dicts()
    executions[1] = data.execution("A/t1/r0/s1", fp="a3", train=(0.25, 0.0), test=(0.0, 0.0))
    write_table(executions_frame(executions), paths["baseline"], EXECUTIONS_SCHEMA)

    frame = refine_prompts(paths, tiny_model, tmp_path / "prompts.parquet", k=3)
    assert frame.height == 6  # K = 3 for each of the 2 tasks
    # A cycles a1 (0.5 right), a3; B's two wrong answers share fingerprint b1: only the first (by id)
    assert frame["prediction_id"].to_list() == ["A/t1/r0/s0", "A/t1/r0/s1", "A/t1/r0/s0"] + ["B/t1/r0/s0"] * 3
    # the second-half predictions (A/r1/s0 is right, B/r1/s0 is wrong) are never refined
    first = frame.row(0, named=True)
    assert first["previous_train_correct_grids"] == 0.5
    assert first["previous_train_outputs"] == [[[2, 0], [0, 0]], [[9]]]
    assert "Your first solution was not correct" in first["prompt"]
    assert first["prompt"] == frame.row(2, named=True)["prompt"]
    assert first["prompt"] != frame.row(1, named=True)["prompt"]
    assert first["prompt_tokens"] > 0


def test_refine_prompts_first_half_and_length_limit(tiny_model, tmp_path):
    paths = data.write_inputs(tmp_path)
    # with all 4 predictions, B's best wrong answer is r1/s0 (0.5 of train right)
    frame = refine_prompts(paths, tiny_model, tmp_path / "all.parquet", k=2, first=4)
    assert frame.filter(pl.col("task_id") == "B")["prediction_id"].to_list() == ["B/t1/r1/s0", "B/t1/r0/s0"]
    assert dropped_prompts(tmp_path / "all.parquet").height == 0


def test_refine_prompts_drop_what_the_refinement_context_cannot_hold(tiny_model, tmp_path, capsys):
    """The limit is the refinement inference's max_model_len - max_tokens (one more BOS with double_bos)."""
    paths = data.write_inputs(tmp_path)
    fits = refine_prompts(paths, tiny_model, tmp_path / "fits.parquet", k=2, max_model_len=100_000, max_tokens=10)
    longest = fits["prompt_tokens"].max()
    assert (fits["prompt_tokens"] < longest).any()  # the tasks' prompts differ in length
    exact = dict(max_model_len=longest + 10, max_tokens=10)
    assert refine_prompts(paths, tiny_model, tmp_path / "exact.parquet", k=2, **exact).height == fits.height
    assert dropped_prompts(tmp_path / "exact.parquet").height == 0
    # the engine would send the longest prompts with a second BOS: one token too many
    kept = refine_prompts(paths, tiny_model, tmp_path / "bos.parquet", k=2, double_bos=True, **exact)
    dropped = dropped_prompts(tmp_path / "bos.parquet")
    assert dropped.height == (fits["prompt_tokens"] == longest).sum() > 0
    assert kept.height + dropped.height == fits.height
    assert set(dropped["prompt_tokens"].to_list()) == {longest}
    assert (
        refine_prompts_status(paths, tiny_model, tmp_path / "none.parquet", k=2, max_model_len=10, max_tokens=10) == 1
    )
    assert "leaves no room" in capsys.readouterr().err


def run_evaluate(paths: dict[str, Path], out: Path, extra_args: tuple[str, ...] = (), **config) -> int:
    return cli_main(
        [
            "evaluate",
            "--tasks",
            str(paths["tasks"]),
            "--baseline-predictions",
            str(paths["baseline_predictions"]),
            "--baseline",
            str(paths["baseline"]),
            "--refiners",
            "base",
            "rl",
            "--refinement-predictions",
            str(paths["base_predictions"]),
            str(paths["rl_predictions"]),
            "--refinements",
            str(paths["base"]),
            str(paths["rl"]),
            "--adapters",
            "rl=results/train/adapter",
            "--training-metrics",
            str(paths["training_metrics"]),
            "--output-dir",
            str(out),
            *extra_args,
            "--config-json",
            json.dumps({"n_eval": data.N_EVAL, "refinement_prompts": data.K, **config}),
        ]
    )


def test_evaluate_stage_end_to_end(tiny_model, tmp_path, capsys):
    paths = data.write_inputs(tmp_path / "in")
    out = tmp_path / "report"
    # refine-prompts with a context too small for any prompt: all of them dropped
    kept = refine_prompts(paths, tiny_model, tmp_path / "prompts.parquet", k=data.K, max_model_len=11, max_tokens=10)
    dropped = tmp_path / "prompts.dropped.parquet"
    n_dropped = read_frame(dropped, REFINEMENT_SCHEMA).height
    assert kept.height == 0 and n_dropped == 2 * data.K
    assert run_evaluate(paths, out, compare_with_published=True) == 1
    assert "--execution-rules" in capsys.readouterr().err
    run_evaluate(
        paths,
        out,
        ("--dropped-refinement-prompts", str(dropped), "--execution-rules", "strict"),
        compare_with_published=True,
    )

    runs = read_frame(out / "runs.parquet", RUNS_SCHEMA)
    assert runs.select("run", "initial", "refinement", "model").rows() == [
        ("baseline", 4, 0, "base"),
        ("refine_base", 2, 4, "base refines"),
        ("refine_rl", 2, 4, "RL-refiner"),
    ]
    assert runs["dropped prompts"].to_list() == [None, n_dropped, n_dropped]
    assert runs["adapter"].to_list() == [None, None, "results/train/adapter"]
    per_task = read_frame(out / "tasks.parquet")
    assert "MEAN" not in per_task["task_id"].to_list()  # the per-task table holds tasks only
    assert per_task.group_by("run").len().sort("run")["len"].to_list() == [2, 2, 2]
    solved_by = (out / "tasks.md").read_text().splitlines()
    assert solved_by[0] == "| task_id | baseline | refine_base | refine_rl |" and len(solved_by) == 2 + 2
    assert all(
        cell.strip() == "solved" or cell.strip().endswith("% px") or cell.strip() == "?"
        for line in solved_by[2:]
        for cell in line.strip("|").split("|")[1:]
    )
    markdown = (out / "runs.md").read_text().splitlines()
    assert markdown[0].startswith("| initial | refinement | model | valid code |")
    assert markdown[0].endswith("| solved | dropped prompts | adapter |")
    assert markdown[2].startswith("| 4 | 0 | base | 87.5% | 62.5% |") and markdown[2].endswith("| - |")
    assert markdown[3].endswith(f"| {n_dropped} | - |")
    assert markdown[4].endswith(f"| {n_dropped} | results/train/adapter |")
    assert '<td class="num">87.5%</td>' in (out / "runs.html").read_text()
    published = (out / "published.md").read_text()
    assert published.count("| published | published |") == 3 and published.count("| this run | strict |") == 3

    kaggle = read_frame(out / "kaggle.parquet", RUN_KAGGLE_SCHEMA)
    assert kaggle["score"].to_list() == [1.0, 0.0, 1.0]
    assert kaggle["best"].to_list() == [True, False, False]
    submission = read_submission(out / "submission.json")
    assert set(submission) == {"A", "B"}
    assert score_submission(submission, data.tasks())["score"].mean() == 1.0

    curves = read_frame(out / "passk.parquet", RUN_PASS_AT_K_SCHEMA)
    assert curves.filter(pl.col("run") == "baseline")["pass_at_k"].to_list() == pytest.approx([0.125, 0.25, 0.375, 0.5])
    errors_md = (out / "errors.md").read_text()
    assert "| base refines | refine_base |" in errors_md and "ZeroDivisionError: it failed" in errors_md
    for name in ("passk.png", "training.png", "errors.png", "examples.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / name).stat().st_size > 5000


def test_evaluate_without_published_and_with_mismatched_arguments(tmp_path, capsys):
    paths = data.write_inputs(tmp_path / "in")
    out = tmp_path / "report"
    run_evaluate(paths, out)
    assert not (out / "published.md").exists()
    assert (
        cli_main(
            [
                "evaluate",
                "--tasks",
                str(paths["tasks"]),
                "--baseline-predictions",
                str(paths["baseline_predictions"]),
                "--baseline",
                str(paths["baseline"]),
                "--refiners",
                "rl",
                "--refinement-predictions",
                "--refinements",
                str(paths["rl"]),
                "--output-dir",
                str(out),
            ]
        )
        == 1
    )
    assert "once per refiner" in capsys.readouterr().err


def test_evaluate_with_unknown_test_solutions(tmp_path):
    """Hidden test outputs (a Kaggle challenge set): no score, no pass@k, still a valid submission."""
    paths = data.write_inputs(tmp_path / "in")
    hidden = [dict(task.to_row(), test_outputs=None) for task in data.tasks()]
    write_table(hidden, paths["tasks"], TASKS_SCHEMA)
    out = tmp_path / "report"
    run_evaluate(paths, out)
    kaggle = read_frame(out / "kaggle.parquet", RUN_KAGGLE_SCHEMA)
    assert kaggle["score"].null_count() == 3
    # without test answers the best guess is the best train_pass_rate: the RL refiner (25% vs 12.5%)
    assert kaggle.filter(pl.col("best"))["run"].to_list() == ["refine_rl"]
    assert set(read_submission(out / "submission.json")) == {"A", "B"}
    assert read_frame(out / "passk.parquet", RUN_PASS_AT_K_SCHEMA).height == 0
    runs = read_frame(out / "runs.parquet", RUNS_SCHEMA)
    assert runs["test_is_correct"].null_count() == 3 and runs["train_is_correct"].to_list()[0] == 0.5
