"""Chunked, resumable execution of a large predictions file (hundreds of thousands of rows).

Finished chunks are kept as parquets in ``<output>.partial/``, each named by its index and a
digest of what decides its result (its predictions, their tasks' grids and the sandbox's time and
memory limits). A rerun after a kill reuses every chunk whose digest still matches and runs the
rest; a pool of processes scores one chunk while the sandbox runs the next. At the end the
chunks are streamed into one parquet that is moved into place atomically, and the partial folder
is removed.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import shutil
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from arc_pipeline.domain.tasks import Task
from arc_pipeline.generation.process_tree import die_with_parent
from arc_pipeline.io import read_table, temp_beside, write_table, writing
from arc_pipeline.sandbox import Sandbox, SandboxConfig
from arc_pipeline.schemas import EXECUTIONS_SCHEMA
from arc_pipeline.scoring.execution import (
    NEEDED_COLUMNS,
    PreparedRun,
    ScoringItem,
    check_predictions,
    finish_run,
    prepare_run,
    run_jobs,
    score_items,
)
from arc_pipeline.scoring.fingerprint import fingerprint

log = logging.getLogger(__name__)


def partial_dir(output: Path) -> Path:
    return output.with_name(output.name + ".partial")


def _task_digest(task: Task) -> str:
    grids = [*task.train_inputs, *task.train_outputs, *task.test_inputs]
    known = [grid for grid in task.test_outputs if grid is not None]
    return f"{task.task_id}:{fingerprint(grids)}:{fingerprint(known)}:{len(known)}"


def chunk_digest(chunk: pl.DataFrame, tasks: Mapping[str, Task], limits: str, task_digests: dict[str, str]) -> str:
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
    with writing(output):
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = temp_beside(output)
        os.close(fd)
        n_rows = 0
        try:
            with pq.ParquetWriter(tmp_name, EXECUTIONS_SCHEMA, compression="zstd", write_page_checksum=True) as writer:
                for path in chunk_paths:
                    table = read_table(path, EXECUTIONS_SCHEMA)
                    writer.write_table(table)
                    n_rows += table.num_rows
            os.replace(tmp_name, output)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    return n_rows


def _split(items: list, parts: int) -> list[list]:
    """``items`` cut into at most ``parts`` contiguous, nearly equal, non-empty pieces."""
    size = -(-len(items) // max(parts, 1)) if items else 1
    return [items[start : start + size] for start in range(0, len(items), size)]


class _Scoring:
    """Scores chunks in a process pool while the sandbox runs the next chunk, writing them in order.

    Scoring (un-augmenting, fingerprinting, pixel similarities) costs a few ms per program: in
    the main process it would cap throughput at a few hundred programs per second however many
    sandbox workers run. With ``workers`` 0 it runs in the main process (no pool).
    """

    MAX_IN_FLIGHT = 2  # chunks scored at once (bounds memory if scoring is slower than the sandbox)

    def __init__(self, workers: int, n_chunks: int) -> None:
        self.workers = workers
        self.n_chunks = n_chunks
        # the workers die with this process even when it is SIGKILLed (they would wait on their queue forever)
        context = multiprocessing.get_context("spawn")
        self.pool = (
            ProcessPoolExecutor(workers, mp_context=context, initializer=die_with_parent, initargs=(os.getpid(),))
            if workers > 0
            else None
        )
        self.in_flight: deque[tuple[int, Path, PreparedRun, list[Future], int]] = deque()
        self.started = time.monotonic()
        self.done_rows = 0

    def submit(self, index: int, path: Path, prepared: PreparedRun, items: list[ScoringItem], n_rows: int) -> None:
        if self.pool is None:
            self._write(index, path, finish_run(prepared, score_items(items)), n_rows)
            return
        futures = [self.pool.submit(score_items, part) for part in _split(items, self.workers)]
        self.in_flight.append((index, path, prepared, futures, n_rows))
        self.flush(block=len(self.in_flight) > self.MAX_IN_FLIGHT)

    def flush(self, block: bool) -> None:
        """Write the finished chunks at the head of the queue (all of them, waiting, if ``block``)."""
        while self.in_flight and (block or all(future.done() for future in self.in_flight[0][3])):
            index, path, prepared, futures, n_rows = self.in_flight.popleft()
            rows = [row for future in futures for row in future.result()]
            self._write(index, path, finish_run(prepared, rows), n_rows)

    def _write(self, index: int, path: Path, executions: pl.DataFrame, n_rows: int) -> None:
        write_table(executions, path, EXECUTIONS_SCHEMA)
        self.done_rows += n_rows
        rate = self.done_rows / max(time.monotonic() - self.started, 1e-9)
        log.info("chunk %d/%d done (%d predictions, %.1f predictions/s)", index + 1, self.n_chunks, n_rows, rate)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def execute_resumable(
    predictions: pl.DataFrame,
    tasks: Mapping[str, Task],
    sandbox_config: SandboxConfig,
    output: str | os.PathLike,
    chunk_size: int = 2000,
    progress: bool = True,
    source: str = "predictions",
    scoring_workers: int = 1,
    rules: str = "strict",
) -> Path:
    """Execute ``predictions`` chunk by chunk into the EXECUTIONS_SCHEMA parquet ``output``.

    ``scoring_workers`` processes score a chunk's outputs while the sandbox runs the next one
    (0: score in this process). ``rules``: the execution rules (:mod:`arc_pipeline.scoring.rules`).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    check_predictions(predictions, tasks, source)
    output = Path(output)
    folder = partial_dir(output)
    folder.mkdir(parents=True, exist_ok=True)
    limits = f"{_limits(sandbox_config)}:rules={rules}"  # changing the rules reruns every chunk
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
        scoring = _Scoring(scoring_workers, n_chunks)
        try:
            with Sandbox(sandbox_config) as sandbox:
                for index, chunk, path in todo:
                    prepared = prepare_run(chunk, tasks, rules)
                    items = run_jobs(sandbox, prepared, tasks, progress)
                    scoring.submit(index, path, prepared, items, chunk.height)
            scoring.flush(block=True)
        finally:
            scoring.close()
    n_rows = _stream_concat([path for _, _, path in plan], output)
    if n_rows != predictions.height:
        raise RuntimeError(f"{output}: {n_rows} executions for {predictions.height} predictions")
    shutil.rmtree(folder)
    log.info("wrote %s (%d rows)", output, n_rows)
    return output
