"""Fail fast, in one line, when the engine stops making progress.

A stalled vLLM engine (a worker spinning in a CPU kernel, a wedged GPU) otherwise sits silent until
vLLM's own 300 s RPC timeout and then dies with a long traceback that names neither the stage nor a
remedy. :class:`StallWatchdog` is told of every sign of life (an engine step returned, a request
finished, the engine came up); when none arrives for ``timeout_s`` it logs one error line saying which
stage stalled, doing what, and what to change, kills every engine process, and ends the stage with
exit code :data:`EXIT_STALLED`. Outputs are written atomically at the end of a stage, so what earlier
stages wrote is untouched and no half-written file is left.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from arc_pipeline.generation.process_tree import kill_descendants

log = logging.getLogger(__name__)

EXIT_STALLED = 3


def _stall_exit(message: str) -> None:
    log.error(message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    kill_descendants("stalled engine")
    os._exit(EXIT_STALLED)  # the main thread is stuck inside vLLM: no orderly way out of it


class StallWatchdog:
    """A daemon thread that calls ``on_stall`` once when :meth:`beat` is not called for ``timeout_s``.

    ``activity`` is a short phrase for the error line ("starting the engine", "generating 64
    completions"); change it with :meth:`doing`. ``on_stall`` defaults to logging the message and
    ending the process; tests pass their own.
    """

    def __init__(
        self,
        stage: str,
        timeout_s: float,
        remedy: str,
        on_stall: Callable[[str], None] = _stall_exit,
        poll_s: float | None = None,
    ) -> None:
        self.stage = stage
        self.timeout_s = timeout_s
        self.remedy = remedy
        self._on_stall = on_stall
        self._poll_s = poll_s if poll_s is not None else min(1.0, timeout_s / 4)
        self._activity = "starting"
        self._progress = ""
        self._last_beat = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{stage}-watchdog", daemon=True)
        self.fired = False

    def start(self) -> StallWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def doing(self, activity: str) -> None:
        self._activity = activity
        self._progress = ""
        self.beat()

    def beat(self, progress: str = "") -> None:
        if progress:
            self._progress = progress
        self._last_beat = time.monotonic()

    def message(self) -> str:
        where = f" ({self._progress})" if self._progress else ""
        return (
            f"{self.stage}: no progress for {self.timeout_s:g} s while {self._activity}{where}; "
            f"the engine is stuck and was stopped. {self.remedy}"
        )

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            if time.monotonic() - self._last_beat > self.timeout_s:
                self.fired = True
                self._on_stall(self.message())
                return

    def __enter__(self) -> StallWatchdog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
