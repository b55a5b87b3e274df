"""One worker process (zygote) as the pipeline sees it: start, wait for ready, run a program, restart, stop."""

from __future__ import annotations

import itertools
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from arc_pipeline.sandbox import protocol
from arc_pipeline.sandbox.job_exchange import exchange
from arc_pipeline.sandbox.replies import result_from_reply
from arc_pipeline.sandbox.types import WORKER_CRASHED, ProgramResult, SandboxConfig

logger = logging.getLogger(__name__)

#: Extra seconds the parent waits for a worker's reply beyond the program's own limit before it
#: declares the worker wedged, kills it and starts a new one.
REPLY_GRACE_S = 15.0
STARTUP_TIMEOUT_S = 120.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _worker_environment() -> dict[str, str]:
    """A minimal environment: no tokens or credentials from the pipeline's environment reach programs.

    No PYTHONPATH either: the worker starts with the interpreter's own paths only (see Worker.start).
    """
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # set and dict orders of strings identical in every worker
        "PYTHONDONTWRITEBYTECODE": "1",
        "MALLOC_ARENA_MAX": "2",  # threads would otherwise reserve 64 MiB of address space each
    }
    for name in (
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
    ):
        env[name] = "1"
    return env


class Worker:
    """One worker process (zygote) and the control socket to it; restarted when it dies or wedges.

    Per program, this side creates two pipes, hands the worker the program's ends, writes the job into
    one and reads the record from the other (job_exchange.py): job data never passes through the worker.
    """

    def __init__(self, config: SandboxConfig, audit_hook: bool, common_module: str) -> None:
        self.config = config
        self.audit_hook = audit_hook
        self.common_module = common_module
        self.process: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.mechanisms: dict[str, str] = {}
        self.job_ids = itertools.count(1)

    def start(self) -> None:
        # -s -P and no PYTHONPATH: the worker's sys.path is the interpreter's own (plus this package's
        # root, appended and removed again before any program runs), not the pipeline's
        bootstrap = "import sys; sys.path.append(sys.argv.pop(1)); from arc_pipeline.sandbox.zygote import main; main()"
        command = [
            sys.executable,
            "-s",
            "-P",
            "-c",
            bootstrap,
            _PACKAGE_PARENT,
            "--package-root",
            _PACKAGE_PARENT,
            "--timeout-s",
            repr(self.config.timeout_s),
            "--memory-mb",
            str(self.config.memory_mb),
            "--parent-pid",
            str(os.getpid()),
            "--common-module",
            self.common_module,
        ]
        if not self.audit_hook:
            command.append("--no-audit-hook")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Blocking whatever socket.setdefaulttimeout says (unsloth's import sets one): the worker inherits its
        # end's file status flags, and a non-blocking end made its first wait for a job fail with EAGAIN.
        ours.setblocking(True)
        theirs.setblocking(True)
        try:
            self.process = subprocess.Popen(
                command,
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                env=_worker_environment(),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours

    def wait_ready(self) -> None:
        body = self._receive(time.monotonic() + STARTUP_TIMEOUT_S)
        if body is None:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(
                f"sandbox worker failed to start (exit code {self.process.returncode}); "
                "its traceback is on stderr above"
            )
        self.mechanisms = json.loads(body)

    def _receive(self, deadline: float) -> bytes | None:
        """One message from the worker, or None on timeout or when it is gone."""
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.control], [], [], left)[0]:
            return None
        try:
            message = self.control.recv(65536)
        except OSError:
            return None
        return message or None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def run(self, code: str, inputs: list[np.ndarray]) -> ProgramResult:
        job_id = next(self.job_ids) & 0xFFFFFFFF
        body = protocol.encode_job(job_id, code, inputs, self.config.max_output_side)
        if not self.alive():
            self.restart()
        started = time.monotonic()
        outcome = None
        try:
            deadline = started + self.config.timeout_s + REPLY_GRACE_S
            outcome = exchange(self.control, job_id, body, len(inputs), self.config.max_output_side, deadline)
        except OSError:
            pass
        if outcome is not None:
            status, detail, duration, record = outcome
            return result_from_reply(
                status, detail, duration, record, len(inputs), self.config.timeout_s, self.config.max_output_side
            )
        # the worker died, wedged or answered nonsense: replace it, record the loss, go on
        self.stop()
        elapsed = time.monotonic() - started
        logger.warning("sandbox worker lost while running a program; starting a new one")
        return ProgramResult(None, WORKER_CRASHED, "the worker process died or stopped answering", elapsed)

    def restart(self) -> None:
        self.stop()
        self.start()
        self.wait_ready()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # the worker and any child it has
            except ProcessLookupError:
                pass
        self.process.wait()
        if self.control is not None:
            self.control.close()
            self.control = None
        self.process = None
