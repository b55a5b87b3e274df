"""Outputs follow the umask (a shared results folder stays readable by the group), yet stay atomic."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from arc_pipeline.io import write_table, write_text
from arc_pipeline.schemas import EXECUTIONS_SCHEMA, TRAINING_METRICS_SCHEMA
from arc_pipeline.scoring.resumable import _stream_concat


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_parquet_text_and_concatenated_outputs_follow_the_umask(tmp_path: Path, umask: int) -> None:
    expected = 0o666 & ~umask
    table = write_table(
        [{"step": 1, "epoch": 0.5, "name": "reward", "value": 0.25}], tmp_path / "m.parquet", TRAINING_METRICS_SCHEMA
    )
    text = write_text("| a |\n", tmp_path / "t.md")
    chunk = write_table([], tmp_path / "chunk.parquet", EXECUTIONS_SCHEMA)
    _stream_concat([chunk], tmp_path / "executions.parquet")
    assert [mode(table), mode(text), mode(tmp_path / "executions.parquet")] == [expected] * 3
    # and no temporary file is left beside them
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_weights_written_0600_by_safetensors_are_shared_like_the_umask(tmp_path: Path, umask: int) -> None:
    import torch
    from safetensors.torch import save_file

    from arc_pipeline.io import share_like_umask

    folder = tmp_path / "adapter"
    folder.mkdir()
    save_file({"w": torch.zeros(2)}, folder / "adapter_model.safetensors")
    (tmp_path / "elsewhere").write_text("x")
    (folder / "link").symlink_to(tmp_path / "elsewhere")
    share_like_umask(folder)
    assert mode(folder / "adapter_model.safetensors") == 0o666 & ~umask
    assert mode(folder) == 0o777 & ~umask
