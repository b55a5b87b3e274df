"""`arc-pipeline inspect`: full text, a row filter and a column selection."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from arc_pipeline.cli import main
from arc_pipeline.io import write_table

SCHEMA = pa.schema(
    [
        pa.field("task_id", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("prompt", pa.string()),
        pa.field("grid", pa.list_(pa.list_(pa.int8()))),
    ]
)


def _file(tmp_path: Path) -> Path:
    rows = [
        {"task_id": "a", "score": 0.0, "prompt": "x" * 400 + " FEEDBACK: wrong colour", "grid": [[1, 2]]},
        {"task_id": "b", "score": 1.0, "prompt": "short", "grid": [[3]]},
        {"task_id": "c", "score": 0.5, "prompt": "medium", "grid": [[4]]},
    ]
    return write_table(rows, tmp_path / "t.parquet", SCHEMA)


def test_long_text_is_cut_unless_full(tmp_path: Path, capsys) -> None:
    path = _file(tmp_path)
    assert main(["inspect", str(path), "-n", "1"]) == 0
    assert "FEEDBACK" not in capsys.readouterr().out
    assert main(["inspect", str(path), "-n", "1", "--full"]) == 0
    assert "FEEDBACK: wrong colour" in capsys.readouterr().out


def test_rows_filtered_and_columns_selected(tmp_path: Path, capsys) -> None:
    path = _file(tmp_path)
    assert main(["inspect", str(path), "--where", "score > 0 AND task_id <> 'b'", "--columns", "task_id,grid"]) == 0
    out = capsys.readouterr().out
    assert "1 rows match" in out and "task_id: c" in out and "task_id: b" not in out and "task_id: a" not in out
    assert "prompt" not in out.split("schema:")[1] and "score:" not in out.split("schema:")[1]
    assert "grid:" in out


def test_bad_column_or_condition_is_one_clear_line(tmp_path: Path, capsys) -> None:
    path = _file(tmp_path)
    assert main(["inspect", str(path), "--columns", "task_ids"]) == 1
    assert "unknown columns ['task_ids']" in capsys.readouterr().err
    assert main(["inspect", str(path), "--where", "nope > 1"]) == 1
    assert "--where 'nope > 1'" in capsys.readouterr().err
