"""The pipeline's side of the sandbox: a pool of worker processes that programs are dispatched to.

One worker's process is managed in worker.py, one program's pipes in job_exchange.py and the decoding of
its reply in replies.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

import numpy as np

from arc_pipeline.sandbox.types import ProgramResult, SandboxConfig
from arc_pipeline.sandbox.worker import Worker

logger = logging.getLogger(__name__)

_logged_mechanisms = False


class Sandbox:
    """Runs model-generated programs in confined worker processes; see docs/sandbox.md.

    Use as a context manager (or call close()). Workers start once and are reused; each program
    runs in a fresh process forked from a worker, under rlimits, Landlock, seccomp and without
    privileges, whatever this machine supports (logged once at INFO).
    ``audit_hook=False`` turns off the Python-level naming of forbidden operations, leaving only
    the kernel's enforcement (used by the tests of that layer).
    ``common_module`` is the module installed as ``common`` in the workers.
    """

    def __init__(
        self,
        config: SandboxConfig = SandboxConfig(),
        *,
        audit_hook: bool = True,
        common_module: str = "arc_pipeline.runtime.common",
    ) -> None:
        self.config = config
        self._workers = [Worker(config, audit_hook, common_module) for _ in range(config.workers)]
        self._lock = threading.Lock()
        self._idle = list(self._workers)
        self._available = threading.Condition(self._lock)
        try:
            for worker in self._workers:
                worker.start()
            for worker in self._workers:
                worker.wait_ready()
        except BaseException:
            self.close()
            raise
        self._log_mechanisms()

    def _log_mechanisms(self) -> None:
        global _logged_mechanisms
        if not _logged_mechanisms:
            _logged_mechanisms = True
            for name, state in self._workers[0].mechanisms.items():
                logger.info("sandbox isolation: %s: %s", name, state)

    @property
    def mechanisms(self) -> dict[str, str]:
        """Which isolation mechanisms are active, as the workers reported them."""
        return dict(self._workers[0].mechanisms)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the workers (and any program still running)."""
        for worker in self._workers:
            worker.stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _take(self) -> Worker:
        with self._available:
            while not self._idle:
                self._available.wait()
            return self._idle.pop()

    def _give(self, worker: Worker) -> None:
        with self._available:
            self._idle.append(worker)
            self._available.notify()

    def run(self, code: str, inputs: list[np.ndarray]) -> ProgramResult:
        """Run one program (as returned by extract_code) on the inputs, in order."""
        if not isinstance(code, str):
            raise TypeError(
                f"code must be a str, got {type(code).__name__}; when extract_code returns None, "
                "record ParsingCodeFailed instead of running"
            )
        worker = self._take()
        try:
            return worker.run(code, list(inputs))
        finally:
            self._give(worker)

    def run_many(self, jobs: Iterable[tuple[str, list[np.ndarray]]], progress: bool = False) -> list[ProgramResult]:
        """Run every (code, inputs) job on all workers in parallel; results in the jobs' order."""
        try:
            total = len(jobs)  # type: ignore[arg-type]
        except TypeError:
            total = None
        iterator: Iterator[tuple[int, tuple[str, list[np.ndarray]]]] = enumerate(jobs)
        results: dict[int, ProgramResult] = {}
        feed_lock = threading.Lock()
        failures: list[BaseException] = []
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="running programs", unit="program")

        def drive() -> None:
            while not failures:
                with feed_lock:
                    try:
                        index, (code, inputs) = next(iterator)
                    except StopIteration:
                        return
                    except BaseException as error:
                        failures.append(error)
                        return
                try:
                    result = self.run(code, inputs)
                except BaseException as error:
                    failures.append(error)
                    return
                results[index] = result
                if bar is not None:
                    bar.update(1)

        threads = [threading.Thread(target=drive, daemon=True) for _ in self._workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if bar is not None:
            bar.close()
        if failures:
            raise failures[0]
        return [results[index] for index in range(len(results))]
