"""The pipeline's side of the sandbox: a pool of worker processes and the decoding of their replies."""

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
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from arc_pipeline.sandbox import protocol
from arc_pipeline.sandbox.types import (
    INVALID_OUTPUT,
    MAX_MESSAGE_CHARS,
    TIMEOUT,
    UNSAFE,
    WORKER_CRASHED,
    ProgramResult,
    SandboxConfig,
)

logger = logging.getLogger(__name__)

#: Extra seconds the parent waits for a worker's reply beyond the program's own limit before it
#: declares the worker wedged, kills it and starts a new one.
REPLY_GRACE_S = 15.0
STARTUP_TIMEOUT_S = 120.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_logged_mechanisms = False


def _worker_environment() -> dict[str, str]:
    """A minimal environment: no tokens or credentials from the pipeline's environment reach programs.

    No PYTHONPATH either: the worker starts with the interpreter's own paths only (see _Worker.start).
    """
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # set and dict orders of strings identical in every worker
        "PYTHONDONTWRITEBYTECODE": "1",
        "MALLOC_ARENA_MAX": "2",  # threads would otherwise reserve 64 MiB of address space each
    }
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
                 "VECLIB_MAXIMUM_THREADS"):
        env[name] = "1"
    return env


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _result_from_reply(status: int, detail: int, duration: float, record: bytes, n_inputs: int,
                       timeout_s: float, max_side: int = protocol.MAX_SIDE) -> ProgramResult:
    def error(kind: str, message: str) -> ProgramResult:
        return ProgramResult(None, kind, message[:MAX_MESSAGE_CHARS], duration)

    if status == protocol.TIMED_OUT:
        return error(TIMEOUT, f"program exceeded the {timeout_s:g} s limit")
    if status == protocol.SETUP_FAILED:
        if record[:1] == protocol.SETUP_FAILED_RECORD:
            reason = record[1:501].decode("utf-8", "replace")
        else:
            reason = "the program's process died or hung during setup"
        return error(WORKER_CRASHED, "isolation setup failed: " + reason)
    if status == protocol.SIGNALED:
        name = _signal_name(detail)
        if detail == signal.SIGSYS:
            return error(UNSAFE, "forbidden system call (stopped by seccomp)")
        if detail == signal.SIGXCPU:
            return error(TIMEOUT, "program exceeded its CPU time limit")
        if detail == signal.SIGXFSZ:
            return error(UNSAFE, "tried to write to a file")
        return error(WORKER_CRASHED, f"program process killed by {name}")
    if status == protocol.EXITED:
        if not record:
            return error(WORKER_CRASHED, f"program process exited with code {detail} without a result")
        try:
            outputs, kind, message = protocol.decode_record(record, n_inputs, max_side)
        except protocol.ProtocolError as problem:
            return error(INVALID_OUTPUT, f"malformed result from the program's process: {problem}")
        if kind is None:
            return ProgramResult(outputs, None, None, duration)
        return error(kind, message or "")
    raise protocol.ProtocolError(f"unknown reply status {status}")


def _close_read_end(fd: int) -> None:
    """Put /dev/null where the pipe's read end was (the caller still closes ``fd``)."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


class _Worker:
    """One worker process (zygote) and the control socket to it; restarted when it dies or wedges.

    Per program, this side creates two pipes, hands the worker the program's ends, writes the job into
    one and reads the record from the other: job data never passes through the worker.
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
            sys.executable, "-s", "-P", "-c", bootstrap, _PACKAGE_PARENT,
            "--package-root", _PACKAGE_PARENT,
            "--timeout-s", repr(self.config.timeout_s),
            "--memory-mb", str(self.config.memory_mb),
            "--parent-pid", str(os.getpid()),
            "--common-module", self.common_module,
        ]
        if not self.audit_hook:
            command.append("--no-audit-hook")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                command, stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
                env=_worker_environment(), start_new_session=True, close_fds=True,
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
            outcome = self._exchange(job_id, body, len(inputs), started)
        except OSError:
            pass
        if outcome is not None:
            status, detail, duration, record = outcome
            return _result_from_reply(status, detail, duration, record, len(inputs), self.config.timeout_s,
                                      self.config.max_output_side)
        # the worker died, wedged or answered nonsense: replace it, record the loss, go on
        self.stop()
        elapsed = time.monotonic() - started
        logger.warning("sandbox worker lost while running a program; starting a new one")
        return ProgramResult(None, WORKER_CRASHED, "the worker process died or stopped answering", elapsed)

    def _exchange(self, job_id: int, body: bytes, n_inputs: int,
                  started: float) -> tuple[int, int, float, bytes] | None:
        """Hand the worker the pipe ends, send the job, collect the record and the worker's status."""
        job_read, job_write = os.pipe()
        record_read, record_write = os.pipe()
        try:
            try:
                socket.send_fds(self.control, [protocol.CONTROL.pack(job_id)], [job_read, record_write])
            finally:
                os.close(job_read)
                os.close(record_write)
            try:
                protocol.write_frame(job_write, body)
            except BrokenPipeError:
                pass  # the process died before reading its job; its status says why
            os.close(job_write)
            job_write = -1
            deadline = started + self.config.timeout_s + REPLY_GRACE_S
            return self._collect(job_id, record_read, n_inputs, deadline)
        finally:
            if job_write >= 0:
                os.close(job_write)
            if record_read >= 0:
                os.close(record_read)

    def _collect(self, job_id: int, record_fd: int, n_inputs: int,
                 deadline: float) -> tuple[int, int, float, bytes] | None:
        limit = protocol.max_record_size(n_inputs, self.config.max_output_side)
        buffer = bytearray()
        status_message = None
        reading = True
        too_large = False
        while reading or status_message is None:
            watched = ([record_fd] if reading else []) + ([self.control] if status_message is None else [])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select(watched, [], [], left)
            if not readable:
                return None
            if reading and record_fd in readable:
                chunk = os.read(record_fd, 65536)
                buffer += chunk
                if not chunk:
                    reading = False
                elif len(buffer) > limit:
                    too_large, reading = True, False
                    _close_read_end(record_fd)  # its further writes fail at once
            if status_message is None and self.control in readable:
                status_message = self.control.recv(64)
                if not status_message:
                    return None
                if reading:  # the process is gone: what it wrote is in the pipe already
                    os.set_blocking(record_fd, False)
                    try:
                        while len(buffer) <= limit:
                            chunk = os.read(record_fd, 65536)
                            if not chunk:
                                break
                            buffer += chunk
                    except BlockingIOError:
                        pass  # a descendant still holds the pipe open; ignore what it may add
                    too_large = len(buffer) > limit
                    reading = False
        try:
            reply_id, status, detail, duration = protocol.decode_status(status_message)
        except protocol.ProtocolError:
            return None
        if reply_id != job_id:
            return None
        if too_large and status != protocol.SETUP_FAILED:
            return protocol.TOO_LARGE, 0, duration, b""
        return status, detail, duration, bytes(buffer)

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


class Sandbox:
    """Runs model-generated programs in confined worker processes; see docs/sandbox.md.

    Use as a context manager (or call close()). Workers start once and are reused; each program
    runs in a fresh process forked from a worker, under rlimits, Landlock, seccomp and without
    privileges, whatever this machine supports (logged once at INFO).
    ``audit_hook=False`` turns off the Python-level naming of forbidden operations, leaving only
    the kernel's enforcement (used by the tests of that layer).
    ``common_module`` is the module installed as ``common`` in the workers.
    """

    def __init__(self, config: SandboxConfig = SandboxConfig(), *, audit_hook: bool = True,
                 common_module: str = "arc_pipeline.runtime.common") -> None:
        self.config = config
        self._workers = [_Worker(config, audit_hook, common_module) for _ in range(config.workers)]
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

    def _take(self) -> _Worker:
        with self._available:
            while not self._idle:
                self._available.wait()
            return self._idle.pop()

    def _give(self, worker: _Worker) -> None:
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
