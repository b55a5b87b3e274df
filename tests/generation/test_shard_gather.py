"""Sharding a tasks or refinement file and gathering shard outputs back."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import polars as pl
import pytest
from inference_helpers import small_tasks, write_tasks

from arc_pipeline.cli import main
from arc_pipeline.helper_commands.gather import gather
from arc_pipeline.helper_commands.shard import shard_bounds
from arc_pipeline.io import InputFileError, read_frame, write_table
from arc_pipeline.schemas import REFINEMENT_SCHEMA, TASKS_SCHEMA


@pytest.mark.parametrize(("n_rows", "count"), [(10, 3), (3, 5), (0, 2), (7, 1), (8, 8)])
def test_shard_bounds_partition_in_order(n_rows: int, count: int) -> None:
    bounds = [shard_bounds(n_rows, k, count) for k in range(count)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n_rows
    assert all(a[1] == b[0] for a, b in pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_shard_bounds_reject_bad_index() -> None:
    with pytest.raises(ValueError, match=r"0\.\.2"):
        shard_bounds(5, 3, 3)
    with pytest.raises(ValueError, match="at least 1"):
        shard_bounds(5, 0, 0)


def test_shard_then_gather_round_trips(tmp_path: Path) -> None:
    source = write_tasks(small_tasks(7), tmp_path / "tasks.parquet")
    shards = []
    for k in range(3):
        out = tmp_path / f"shard{k}.parquet"
        assert main(["shard", "--tasks", str(source), "--index", str(k), "--count", "3", "--output", str(out)]) == 0
        shards.append(out)
    assert [read_frame(p).height for p in shards] == [3, 2, 2]
    gathered = tmp_path / "all.parquet"
    assert main(["gather", "--inputs", *map(str, shards), "--output", str(gathered), "--schema", "tasks"]) == 0
    assert read_frame(gathered, TASKS_SCHEMA).equals(read_frame(source, TASKS_SCHEMA))


def write_refinements(path: Path, task_ids: list[str]) -> Path:
    """A refinement parquet with one row per entry of ``task_ids`` (identity augmentation, placeholder text)."""
    tasks = {task.task_id: task for task in small_tasks(len(set(task_ids)))}
    names = dict(zip(dict.fromkeys(task_ids), tasks, strict=True))
    rows = []
    for i, task_id in enumerate(task_ids):
        row = tasks[names[task_id]].to_row()
        rows.append(
            {
                **row,
                "task_id": task_id,
                "prediction_id": f"{task_id}/t1/r0/s{i}",
                "hflip": False,
                "rot90_k": 0,
                "color_map": list(range(10)),
                "test_index": 0,
                "previous_text": f"answer {i}",
                "previous_train_outputs": row["train_outputs"],
                "previous_train_correct_grids": 0.5,
                "previous_train_pixel_score": 0.5,
                "prompt": f"prompt {i}",
                "prompt_tokens": 2,
            }
        )
    write_table(rows, path, REFINEMENT_SCHEMA)
    return path


def shard_command(source: Path, k: int, count: int, out: Path, *schema: str) -> int:
    return main(
        ["shard", "--input", str(source), "--index", str(k), "--count", str(count), "--output", str(out), *schema]
    )


def test_refinements_shard_into_contiguous_blocks(tmp_path: Path) -> None:
    """The SFT sampling's shards (rules/sft.smk): contiguous blocks whose concatenation is the input."""
    source = write_refinements(tmp_path / "refinement.parquet", [f"task_{i}" for i in range(7)])
    shards = [tmp_path / f"shard{k}.parquet" for k in range(3)]
    for k, out in enumerate(shards):
        assert shard_command(source, k, 3, out, "--schema", "refinements") == 0
    frames = [read_frame(path, REFINEMENT_SCHEMA) for path in shards]
    assert [frame["task_id"].to_list() for frame in frames] == [
        ["task_0", "task_1", "task_2"],
        ["task_3", "task_4"],
        ["task_5", "task_6"],
    ]
    assert pl.concat(frames).equals(read_frame(source, REFINEMENT_SCHEMA))


def test_shard_names_the_file_of_the_wrong_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = write_tasks(small_tasks(3), tmp_path / "tasks.parquet")
    assert shard_command(tasks, 0, 2, tmp_path / "out.parquet", "--schema", "refinements") == 1
    assert f"arc-pipeline shard: {tasks}: missing columns" in capsys.readouterr().err
    refinements = write_refinements(tmp_path / "refinement.parquet", ["task_0", "task_1"])
    assert shard_command(refinements, 0, 2, tmp_path / "out.parquet") == 1  # --schema tasks, the default
    assert f"arc-pipeline shard: {refinements}: missing columns" in capsys.readouterr().err
    assert not (tmp_path / "out.parquet").exists()


def test_refinement_shards_keep_a_task_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inference numbers a task's refinement rounds in file order: a shard cutting through them would repeat
    prediction ids, so the shard command refuses (rather than the gather, after the GPU jobs)."""
    source = write_refinements(tmp_path / "refinement.parquet", ["task_0", "task_0", "task_1", "task_1"])
    assert shard_command(source, 1, 2, tmp_path / "ok.parquet", "--schema", "refinements") == 0
    assert read_frame(tmp_path / "ok.parquet")["task_id"].to_list() == ["task_1", "task_1"]
    assert shard_command(source, 0, 4, tmp_path / "cut.parquet", "--schema", "refinements") == 1
    assert f"{source}: shard 0 of 4 would split the rows of task task_0" in capsys.readouterr().err
    assert not (tmp_path / "cut.parquet").exists()


def test_gather_refuses_duplicates_and_wrong_schema(tmp_path: Path) -> None:
    source = write_tasks(small_tasks(3), tmp_path / "tasks.parquet")
    with pytest.raises(InputFileError, match="duplicate task_id"):
        gather([source, source], "tasks")
    with pytest.raises(InputFileError, match="missing columns"):
        gather([source], "predictions")
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(InputFileError, match=r"bad\.parquet"):
        gather([tmp_path / "bad.parquet"], "tasks")
