"""Chunked, resumable execution of a large predictions file (hundreds of thousands of rows).

Finished chunks are kept as parquets in ``<output>.partial/``, each named by its index and a
digest of what decides its result (its predictions, their tasks' grids and the sandbox's time and
memory limits). A rerun after a kill reuses every chunk whose digest still matches and runs the
rest; at the end the chunks are streamed into one parquet that is moved into place atomically,
and the partial folder is removed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from arc_pipeline.domain.tasks import Task
from arc_pipeline.io import read_table, write_table
from arc_pipeline.sandbox import Sandbox, SandboxConfig
from arc_pipeline.schemas import EXECUTIONS_SCHEMA
from arc_pipeline.scoring.execution import NEEDED_COLUMNS, check_predictions, execute_predictions
from arc_pipeline.scoring.fingerprint import fingerprint

log = logging.getLogger(__name__)


def partial_dir(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def _task_digest(task: Task) -> str:
    grids = [*task.train_inputs, *task.train_outputs, *task.test_inputs]
    known = [grid for grid in task.test_outputs if grid is not None]
    return f"{task.task_id}:{fingerprint(grids)}:{fingerprint(known)}:{len(known)}"


def chunk_digest(chunk: pl.DataFrame, tasks: Mapping[str, Task], limits: str,
                 task_digests: dict[str, str]) -> str:
    """16 hex characters that change whenever the chunk's result could change."""
    digest = hashlib.sha256(limits.encode())
    for row in chunk.select(NEEDED_COLUMNS).iter_rows():
        digest.update(repr(row).encode())
    for task_id in sorted(set(chunk["task_id"].to_list())):
        if task_id not in task_digests:
            task_digests[task_id] = _task_digest(tasks[task_id])
        digest.update(task_digests[task_id].encode())
    return digest.hexdigest()[:16]


def _limits(sandbox_config: SandboxConfig) -> str:
    """The sandbox settings that change results (not the number of workers)."""
    return repr((sandbox_config.timeout_s, sandbox_config.memory_mb))


def _stream_concat(chunk_paths: list[Path], output: Path) -> int:
    """Write the chunks (already validated) into ``output`` atomically, one chunk in memory at a time."""
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    os.close(fd)
    n_rows = 0
    try:
        with pq.ParquetWriter(tmp_name, EXECUTIONS_SCHEMA, compression="zstd") as writer:
            for path in chunk_paths:
                table = read_table(path, EXECUTIONS_SCHEMA)
                writer.write_table(table)
                n_rows += table.num_rows
        os.replace(tmp_name, output)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return n_rows


def execute_resumable(
    predictions: pl.DataFrame,
    tasks: Mapping[str, Task],
    sandbox_config: SandboxConfig,
    output: str | os.PathLike,
    chunk_size: int = 2000,
    progress: bool = True,
    source: str = "predictions",
) -> Path:
    """Execute ``predictions`` chunk by chunk into the EXECUTIONS_SCHEMA parquet ``output``."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    check_predictions(predictions, tasks, source)
    output = Path(output)
    folder = partial_dir(output)
    folder.mkdir(parents=True, exist_ok=True)
    limits = _limits(sandbox_config)
    task_digests: dict[str, str] = {}
    n_chunks = max(1, -(-predictions.height // chunk_size))
    plan: list[tuple[int, pl.DataFrame, Path]] = []
    for index in range(n_chunks):
        chunk = predictions.slice(index * chunk_size, chunk_size)
        name = f"chunk-{index:06d}-{chunk_digest(chunk, tasks, limits, task_digests)}.parquet"
        plan.append((index, chunk, folder / name))
    wanted = {path.name for _, _, path in plan}
    for stale in folder.glob("chunk-*.parquet"):
        if stale.name not in wanted:
            stale.unlink()
    todo = [(index, chunk, path) for index, chunk, path in plan if not path.exists()]
    if len(todo) < len(plan):
        log.info("resuming: %d of %d chunks already executed in %s", len(plan) - len(todo), len(plan), folder)
    if todo:
        started = time.monotonic()
        done_rows = 0
        with Sandbox(sandbox_config) as sandbox:
            for index, chunk, path in todo:
                executions = execute_predictions(chunk, tasks, sandbox, progress=progress)
                write_table(executions, path, EXECUTIONS_SCHEMA)
                done_rows += chunk.height
                rate = done_rows / max(time.monotonic() - started, 1e-9)
                log.info("chunk %d/%d done (%d predictions, %.1f predictions/s)", index + 1, n_chunks,
                         chunk.height, rate)
    n_rows = _stream_concat([path for _, _, path in plan], output)
    if n_rows != predictions.height:
        raise RuntimeError(f"{output}: {n_rows} executions for {predictions.height} predictions")
    shutil.rmtree(folder)
    log.info("wrote %s (%d rows)", output, n_rows)
    return output
