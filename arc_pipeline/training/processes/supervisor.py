"""The child processes of a multi-process train job: started, watched and stopped together.

Each child starts in its own session (its own process group), so one signal reaches the child and what it
forked (torchrun's ranks, vLLM's engine processes). The supervising stage process becomes a child subreaper
(arc_pipeline/generation/process_tree.py): a grandchild whose parent died is re-parented to it and stays
findable. :meth:`Supervisor.stop` sends SIGTERM to one group after another, the last started first, each with
``grace_s`` seconds to exit (a training rank finishes its step and saves a checkpoint on SIGTERM:
arc_pipeline/training/processes/preemption.py, while the server it may wait on still runs), then sends SIGKILL to the
groups and to every process below the stage that carries the supervisor's tag (an environment variable every
child and its descendants inherit): nothing the job started outlives the stage.

Children inherit the stage's stdout and stderr, which ``arc-pipeline --log-file`` sends to the stage's log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from types import FrameType

from arc_pipeline.errors import PipelineError
from arc_pipeline.generation.process_tree import descendants, kill_all, own_descendants

log = logging.getLogger(__name__)

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
TAG_VARIABLE = "ARC_PIPELINE_SUPERVISOR"


class StageStopped(PipelineError):
    """The stage got SIGTERM, SIGINT or SIGHUP while its processes ran; they were stopped."""


class Supervisor:
    """Start named children; :meth:`stop` ends them all. Use as a context manager: leaving it, however
    (an error, a signal), stops every child. While active, SIGTERM/SIGINT/SIGHUP raise :class:`StageStopped`
    in the main thread instead of ending the stage on the spot, so the children are stopped first."""

    def __init__(self, grace_s: float = 30.0) -> None:
        self.grace_s = grace_s
        self.tag = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"  # inherited by every process of the job (the sweep)
        self.children: dict[str, subprocess.Popen] = {}
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Supervisor:
        for signum in _STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        # after our handlers: own_descendants keeps handlers already set and adds the subreaper and an exit sweep
        own_descendants()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum in _STOP_SIGNALS:  # a second signal must not cut the stopping short
            signal.signal(signum, signal.SIG_IGN)
        try:
            self.stop()
        finally:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)  # type: ignore[arg-type]
            self._previous.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        raise StageStopped(
            f"stopped by {signal.Signals(signum).name}: the job's processes were stopped; a rerun resumes from "
            "the last checkpoint"
        )

    def start(self, name: str, command: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen:
        log.info("starting %s: %s", name, " ".join(command))
        environment = {**(os.environ if env is None else env), TAG_VARIABLE: self.tag}
        process = subprocess.Popen(list(command), env=environment, stdin=subprocess.DEVNULL, start_new_session=True)
        self.children[name] = process
        return process

    def exited(self) -> tuple[str, int] | None:
        """The first child (in start order) that has exited, with its status; None while all run."""
        for name, process in self.children.items():
            status = process.poll()
            if status is not None:
                return name, status
        return None

    def wait_any(self, poll_s: float = 0.5) -> tuple[str, int]:
        """Block until a child exits; its name and status."""
        while (done := self.exited()) is None:
            time.sleep(poll_s)
        return done

    def stop(self) -> None:
        """Stop the children in reverse start order: SIGTERM to a child's group and up to ``grace_s`` to exit,
        then the next. The ranks, started after the server, finish their step and save their checkpoint while
        the server they may be waiting on still answers; a server stopped first would leave them waiting on it
        until SIGKILL, without that checkpoint. Then SIGKILL to every group and to every process still below
        this one."""
        for process in reversed(list(self.children.values())):
            if process.poll() is not None:
                continue
            _signal_group(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if process.poll() is None:
                log.warning("pid %d did not exit %.0f s after SIGTERM: SIGKILL", process.pid, self.grace_s)
        for process in self.children.values():
            _signal_group(process.pid, signal.SIGKILL)  # also the group's members left after its leader exited
        for _ in range(5):  # processes that left their group (their own sessions), re-parented to us
            pids = [pid for pid in descendants() if _tagged(pid, self.tag)]
            if not pids:
                break
            kill_all(pids)
            time.sleep(0.1)
        for process in self.children.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("pid %d survived SIGKILL", process.pid)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _tagged(pid: int, tag: str) -> bool:
    """Whether ``pid`` inherited this supervisor's tag: a process of the job, not another helper of the stage
    (the GPU memory sampler's nvidia-smi)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return f"{TAG_VARIABLE}={tag}".encode() in handle.read().split(b"\0")
    except OSError:
        return False
