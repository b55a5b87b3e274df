"""Only stale artifacts rerun (issue 2): proven with real Snakemake runs of the data stages."""

from __future__ import annotations

from tests.workflow.conftest import Workflow

PARTS = ["barc_split/part1.parquet", "barc_split/part2.parquet"]


def targets(workflow: Workflow) -> list[str]:
    return [workflow.target(part) for part in PARTS]


def mtimes(workflow: Workflow, *relatives: str) -> dict[str, int]:
    return {relative: workflow.path(relative).stat().st_mtime_ns for relative in relatives}


def test_second_run_does_nothing(workflow: Workflow) -> None:
    workflow.snakemake(*targets(workflow))
    assert all(workflow.path(part).exists() for part in PARTS)
    assert workflow.planned_jobs(*targets(workflow)) == {}


def test_changing_tasks_per_part_reruns_only_the_split(workflow: Workflow) -> None:
    workflow.snakemake(*targets(workflow))
    upstream = mtimes(workflow, "barc_download/data.jsonl", "barc_tasks/tasks.parquet")
    before = mtimes(workflow, *PARTS)

    workflow.config["barc"]["split"]["tasks_per_part"] += 1
    workflow.write_config()
    assert workflow.planned_jobs(*targets(workflow)) == {"barc_split": 2}

    workflow.snakemake(*targets(workflow))
    assert mtimes(workflow, "barc_download/data.jsonl", "barc_tasks/tasks.parquet") == upstream
    after = mtimes(workflow, *PARTS)
    assert all(after[part] != before[part] for part in PARTS)
    import polars as pl

    assert pl.read_parquet(workflow.path(PARTS[0])).height == workflow.config["barc"]["split"]["tasks_per_part"]


def test_deleting_one_part_regenerates_only_that_part(workflow: Workflow) -> None:
    workflow.snakemake(*targets(workflow))
    kept = mtimes(workflow, PARTS[1], "barc_tasks/tasks.parquet")
    workflow.path(PARTS[0]).unlink()
    assert workflow.planned_jobs(*targets(workflow)) == {"barc_split": 1}
    workflow.snakemake(*targets(workflow))
    assert workflow.path(PARTS[0]).exists()
    assert mtimes(workflow, PARTS[1], "barc_tasks/tasks.parquet") == kept


def test_malformed_config_fails_before_any_job_naming_the_field(workflow: Workflow) -> None:
    workflow.config["barc"]["split"]["tasks_per_part"] = "many"
    workflow.write_config()
    result = workflow.snakemake("-n", *targets(workflow), check=False)
    assert result.returncode != 0
    assert "tasks_per_part" in result.stdout + result.stderr
    assert not (workflow.workdir / workflow.config["results_dir"]).exists()


def test_unknown_field_is_rejected(workflow: Workflow) -> None:
    workflow.config["barc"]["tasks"]["seeed"] = 3
    workflow.write_config()
    result = workflow.snakemake("-n", *targets(workflow), check=False)
    assert result.returncode != 0
    assert "seeed" in result.stdout + result.stderr
