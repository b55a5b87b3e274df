"""Disk faults: a full disk while a stage writes, and damaged parquet files between stages.

Full disk: a real small filesystem (tmpfs, mounted by the test, so it needs root: skipped otherwise,
but under CI=true it fails instead, so that CI cannot pass without running it). Damaged files: real
parquet files cut short or with one bit flipped, read by the real consumers.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from arc_pipeline.io import DiskFullError, InputFileError, read_frame, replace_folder, write_table, write_text
from arc_pipeline.schemas import TASKS_SCHEMA

CLI = [sys.executable, "-m", "arc_pipeline.cli"]


def cannot_run(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but the disk-full tests cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 KiB filesystem of its own (tmpfs), unmounted afterwards."""
    if os.geteuid() != 0:
        cannot_run("mounting a small tmpfs needs root")
    if shutil.which("mount") is None:
        cannot_run("no mount command")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        cannot_run(f"mount -t tmpfs failed: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def big_rows(n: int = 2000) -> list[dict]:
    """Task rows that compress poorly: several hundred KiB of parquet."""
    rng = np.random.default_rng(0)
    rows = []
    for index in range(n):
        grid = rng.integers(0, 10, (12, 12)).tolist()
        rows.append(
            {
                "task_id": f"task{index:05d}",
                "train_inputs": [grid],
                "train_outputs": [grid],
                "test_inputs": [grid],
                "test_outputs": [grid],
                "source": "test",
            }
        )
    return rows


def test_write_table_on_a_full_disk_names_the_file_and_leaves_nothing(small_disk):
    target = small_disk / "results" / "tasks.parquet"
    with pytest.raises(DiskFullError, match="no space left") as raised:
        write_table(big_rows(), target, TASKS_SCHEMA)
    assert str(target) in str(raised.value)
    assert [p.name for p in target.parent.iterdir()] == []  # no temporary file, no partial table


def test_text_and_folders_on_a_full_disk(small_disk):
    with pytest.raises(DiskFullError, match=r"report\.md"):
        write_text("x" * 200_000, small_disk / "report.md")
    with pytest.raises(DiskFullError, match="adapter"), replace_folder(small_disk / "adapter") as staging:
        (staging / "weights.bin").write_bytes(os.urandom(200_000))
    assert sorted(p.name for p in small_disk.iterdir()) == []


def test_a_stage_on_a_full_disk_says_so_in_one_line(small_disk, tmp_path):
    """The real command, its log on the same full disk (Snakemake's logs live under results/)."""
    output = small_disk / "results" / "arc_tasks" / "tasks.parquet"
    log_file = small_disk / "results" / "logs" / "arc_tasks.log"
    result = subprocess.run(
        [*CLI, "--log-file", str(log_file), "arc-tasks", "--output", str(output)]
        + ["--config-json", json.dumps({"max_tasks": 400})],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("arc-pipeline ")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"arc-pipeline arc-tasks: {output}: no space left while writing it")
    assert "Traceback" not in result.stderr
    assert not output.exists()
    assert [p.name for p in output.parent.iterdir()] == []


# --- damaged intermediate files ------------------------------------------------------------------------


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    return write_table(big_rows(200), tmp_path / "tasks.parquet", TASKS_SCHEMA)


def damaged_copies(path: Path, count: int, seed: int = 0):
    """``count`` copies of ``path``, each cut short at a random length or with one random bit flipped."""
    data = path.read_bytes()
    rng = random.Random(seed)
    for index in range(count):
        damaged = bytearray(data)
        if index % 2:
            damaged = damaged[: rng.randrange(len(data))]
        else:
            position = rng.randrange(len(data))
            damaged[position] ^= 1 << rng.randrange(8)
        copy = path.with_name(f"damaged{index}.parquet")
        copy.write_bytes(bytes(damaged))
        yield copy


def test_a_damaged_parquet_is_named_or_read_unchanged(tasks_file):
    """Never other data: page checksums catch the flipped bits that would otherwise decode as other
    numbers (measured without them: about a third of single-bit flips read back as different data)."""
    original = read_frame(tasks_file, TASKS_SCHEMA)
    named = 0
    for copy in damaged_copies(tasks_file, 60):
        try:
            frame = read_frame(copy, TASKS_SCHEMA)
        except InputFileError as error:
            message = str(error)
        else:
            assert frame.equals(original), f"{copy.name} read back as other data"
            continue
        assert message.startswith(f"{copy}: "), message
        named += 1
    assert named >= 40  # most damage is detected (the rest hit bytes that do not change the data)


def test_the_consumer_names_a_truncated_input_and_how_to_rebuild_it(tasks_file, tmp_path):
    tasks_file.write_bytes(tasks_file.read_bytes()[:-100])
    result = subprocess.run(
        [*CLI, "barc-split", "--tasks", str(tasks_file), "--part", "1", "--output", str(tmp_path / "part1.parquet")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"arc-pipeline barc-split: {tasks_file}: not a readable parquet file")
    assert "delete it and rerun" in line and "Traceback" not in result.stderr
    assert not (tmp_path / "part1.parquet").exists()


def test_the_execute_stage_names_a_damaged_chunk_it_would_resume_from(tmp_path):
    """A chunk kept for resuming (execute's .partial folder) that is damaged on disk is named, not merged."""
    from arc_pipeline.schemas import EXECUTIONS_SCHEMA
    from arc_pipeline.scoring.resumable import _stream_concat
    from tests.scoring.scoring_helpers import fixture_executions

    chunk = write_table(fixture_executions(), tmp_path / "chunk-000000-x.parquet", EXECUTIONS_SCHEMA)
    merged = tmp_path / "executions.parquet"
    assert _stream_concat([chunk], merged) == fixture_executions().height  # whole, it is merged
    merged.unlink()
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])
    with pytest.raises(InputFileError, match=re.escape(f"{chunk}: not a readable parquet file")):
        _stream_concat([chunk], merged)
    assert sorted(p.name for p in tmp_path.iterdir()) == [chunk.name]


def test_checksums_do_not_change_what_is_read(tmp_path):
    rows = big_rows(20)
    path = write_table(rows, tmp_path / "t.parquet", TASKS_SCHEMA)
    assert pl.read_parquet(path).to_dicts() == read_frame(path, TASKS_SCHEMA).to_dicts()
    assert read_frame(path)["task_id"].to_list() == [row["task_id"] for row in rows]
