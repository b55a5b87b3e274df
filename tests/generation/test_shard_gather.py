"""Sharding a tasks file and gathering shard outputs back."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import polars as pl
import pytest
from inference_helpers import small_tasks, write_tasks

from arc_pipeline.cli import main
from arc_pipeline.helper_commands.gather import gather
from arc_pipeline.helper_commands.shard import shard_bounds
from arc_pipeline.io import InputFileError, read_frame
from arc_pipeline.schemas import TASKS_SCHEMA


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


def test_gather_refuses_duplicates_and_wrong_schema(tmp_path: Path) -> None:
    source = write_tasks(small_tasks(3), tmp_path / "tasks.parquet")
    with pytest.raises(InputFileError, match="duplicate task_id"):
        gather([source, source], "tasks")
    with pytest.raises(InputFileError, match="missing columns"):
        gather([source], "predictions")
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(InputFileError, match=r"bad\.parquet"):
        gather([tmp_path / "bad.parquet"], "tasks")
