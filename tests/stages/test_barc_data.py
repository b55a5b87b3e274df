"""BARC rows -> tasks -> parts (docs/formats.md) and the download stage's errors."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.cli import main
from arc_pipeline.domain.tasks import Task
from arc_pipeline.errors import PipelineError
from arc_pipeline.stages.barc_download import BarcDownloadConfig, bundled_sample_path, fetch
from arc_pipeline.stages.barc_split import BarcSplitConfig, part_task_ids
from arc_pipeline.stages.barc_tasks import TRAIN_PAIRS_WEIGHTS, BarcTasksConfig, convert, row_to_task


def grid(value: int, size: int = 2) -> list[list[int]]:
    return [[value] * size for _ in range(size)]


def example(value: int, size: int = 2) -> list:
    return [grid(value, size), grid((value + 1) % 10, size)]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_row_becomes_task_with_one_test_pair_and_distinct_examples() -> None:
    row = {"examples": [example(v) for v in range(6)], "source": "", "seeds": []}
    task = row_to_task(7, row, BarcTasksConfig())
    assert task.task_id == "barc_000007"
    assert len(task.test) == 1
    assert 2 <= len(task.train) <= 5  # n <= len(examples) - 1
    chosen = [int(p.input[0, 0]) for p in (*task.train, *task.test)]
    assert len(set(chosen)) == len(chosen)


def test_train_pair_counts_follow_the_barc_weights() -> None:
    row = {"examples": [example(v % 10) for v in range(12)]}
    counts = dict.fromkeys(TRAIN_PAIRS_WEIGHTS, 0)
    for index in range(3000):
        counts[len(row_to_task(index, row, BarcTasksConfig()).train)] += 1
    total_weight = sum(TRAIN_PAIRS_WEIGHTS.values())
    for n, weight in TRAIN_PAIRS_WEIGHTS.items():
        assert counts[n] / 3000 == pytest.approx(weight / total_weight, abs=0.03)


def test_draws_are_reproducible_per_row_and_seed() -> None:
    row = {"examples": [example(v) for v in range(8)]}
    first = row_to_task(3, row, BarcTasksConfig(seed=1))
    again = row_to_task(3, row, BarcTasksConfig(seed=1))
    assert first.to_row() == again.to_row()
    other_seeds = {len(row_to_task(3, row, BarcTasksConfig(seed=s)).train) for s in range(20)}
    assert len(other_seeds) > 1


def test_oversized_draws_are_rejected() -> None:
    # 30x30 pairs: 1,800 cells each, so at most 2 pairs fit in 4,500 cells: every draw (>= 3 pairs) fails.
    row = {"examples": [example(v, 30) for v in range(5)]}
    with pytest.raises(ValueError, match="too_many_cells"):
        row_to_task(0, row, BarcTasksConfig())


def test_malformed_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    good = {"examples": [example(v) for v in range(4)]}
    lines = [
        good,
        "not json {",
        {"source": "no examples"},
        {"examples": [example(1), example(2)]},  # fewer than 3
        {"examples": [example(1), [grid(1), [[1, 2], [3]]], example(3)]},  # ragged grid
        {"examples": [example(1), [grid(1), [[1, 12]]], example(3)]},  # value outside 0..9
        {"examples": [example(1), [grid(1), grid(1, 31)], example(3)]},  # over 30 x 30
        {"examples": [example(1), [grid(1)], example(3)]},  # not a pair
        good,
    ]
    jsonl = write_jsonl(tmp_path / "data.jsonl", lines)
    summary = convert(jsonl, tmp_path / "tasks.parquet", BarcTasksConfig())
    assert summary["tasks"] == 2
    assert summary["skipped"] == {
        "grid_too_large": 1,
        "missing_examples": 1,
        "not_json": 1,
        "ragged_examples": 2,
        "too_few_examples": 1,
        "values_out_of_range": 1,
    }
    written = json.loads((tmp_path / "tasks.summary.json").read_text())
    assert written == summary
    frame = pl.read_parquet(tmp_path / "tasks.parquet")
    assert frame["task_id"].to_list() == ["barc_000000", "barc_000008"]
    Task.from_row(frame.row(0, named=True))  # round-trips


def test_split_parts_are_disjoint_blocks_of_one_shuffle() -> None:
    ids = [f"barc_{i:06d}" for i in range(20)]
    config = BarcSplitConfig(n_parts=3, tasks_per_part=5, seed=4)
    parts = [part_task_ids(ids, part, config) for part in (1, 2, 3)]
    assert all(len(part) == 5 for part in parts)
    assert len(set().union(*parts)) == 15
    assert part_task_ids(list(reversed(ids)), 2, config) == parts[1]  # input order does not matter
    with pytest.raises(PipelineError, match="need 25 tasks"):
        part_task_ids(ids, 1, BarcSplitConfig(n_parts=5, tasks_per_part=5))


def test_bundled_sample_has_at_least_64_rows_of_pairs() -> None:
    rows = [json.loads(line) for line in bundled_sample_path().read_text().splitlines()]
    assert len(rows) >= 64
    assert all(len(row["examples"]) >= 3 and all(len(pair) == 2 for pair in row["examples"]) for row in rows)


def test_download_offline_says_how_to_use_a_local_file(tmp_path: Path, monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the hub client reads the variable when it is first imported (an earlier test may have): its constant too,
    # or the download waits for the network's timeouts instead of failing offline at once
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PipelineError) as error:
        fetch(BarcDownloadConfig(source="hub"), tmp_path / "data.jsonl")
    assert "local_path" in str(error.value) and "source: local" in str(error.value)
    assert not (tmp_path / "data.jsonl").exists()


def test_local_source_copies_the_file(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "mine.jsonl", [{"examples": []}])
    fetch(BarcDownloadConfig(source="local", local_path=str(source)), tmp_path / "out" / "data.jsonl")
    assert (tmp_path / "out" / "data.jsonl").read_text() == source.read_text()
    with pytest.raises(PipelineError, match="not found"):
        fetch(BarcDownloadConfig(source="local", local_path=str(tmp_path / "missing.jsonl")), tmp_path / "x")


def test_cli_rejects_a_bad_field_naming_it(tmp_path: Path, capsys) -> None:
    assert (
        main(
            [
                "barc-split",
                "--tasks",
                "x",
                "--part",
                "1",
                "--output",
                str(tmp_path / "o"),
                "--config-json",
                '{"tasks_per_part": "many"}',
            ]
        )
        == 1
    )
    assert "tasks_per_part" in capsys.readouterr().err
