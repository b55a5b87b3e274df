"""The worker process: imports everything once, then forks one confined child per program.

Started by :class:`arc_pipeline.sandbox.Sandbox` with a SOCK_SEQPACKET socket as its stdin. Per job it
receives only a job id and two pipe ends, forks, and answers with the child's status (see
:mod:`protocol`). It never runs program code and never reads a job or a result; each child is a copy
of its warmed-up state, so a program starts in about a millisecond and holds no byte of other jobs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time

PRELOADED_MODULES = (
    "math cmath itertools collections collections.abc functools copy heapq typing dataclasses enum re "
    "string time operator bisect statistics random fractions decimal numbers abc array queue json "
    "textwrap contextlib types warnings datetime struct weakref io colorsys hashlib pprint traceback "
    "inspect unicodedata numpy numpy.linalg numpy.fft numpy.random numpy.polynomial numpy.ma "
    "numpy.lib.stride_tricks"
).split()
#: BARC's programs use scipy.ndimage (label, correlate, ...). Only that is preloaded: every preloaded
#: MiB makes each fork slower (with scipy.signal/stats the worker doubles to ~110 MiB and fork + exit
#: from ~2.5 to ~4.5 ms); other scipy modules stay importable, at their import cost, in the program's time.
OPTIONAL_MODULES = ("scipy", "scipy.ndimage")
SETUP_DEADLINE_S = 10.0


def _preload(common_module: str) -> None:
    for name in PRELOADED_MODULES:
        importlib.import_module(name)
    for name in OPTIONAL_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    sys.modules["common"] = importlib.import_module(common_module)
    time.localtime()  # reads the time zone file now, while files can be opened


def _reap(pid: int) -> tuple[int, int]:
    """(status, detail) for a finished child."""
    _, wait_status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wait_status):
        return 1, os.WTERMSIG(wait_status)
    return 0, os.waitstatus_to_exitcode(wait_status)


class Zygote:
    """Forks one confined child per job; never reads a job, an input or a result.

    The pipeline sends, per job, only a job id and two pipe ends (the job pipe's read end and the
    record pipe's write end). The child reads its job from the first after it has confined itself and
    writes its record to the second; both go straight to the pipeline. So this process, and with it
    every later child forked from it, never holds any byte of any program's code, inputs or results.
    From the child it reads at most one byte, the "isolation is up" signal, on a pipe the child closes
    before the program's code is compiled.
    """

    def __init__(self, isolation, timeout_s: float, audit_hook: bool) -> None:
        from arc_pipeline.sandbox import child, protocol

        self.child, self.protocol = child, protocol
        self.isolation = isolation
        self.timeout_s = timeout_s
        self.audit_hook = audit_hook
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.pid = os.getpid()
        self.ctypes_functions: list = []

    def run_job(self, job_id: int, job_fd: int, record_fd: int) -> bytes:
        """Fork, supervise and reap one child; the status message for the pipeline."""
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_read)
            self.child.run(
                job_fd,
                record_fd,
                ready_write,
                self.devnull,
                self.pid,
                self.isolation,
                self.audit_hook,
                self.ctypes_functions,
            )
        os.close(ready_write)
        os.close(job_fd)
        os.close(record_fd)
        pidfd = os.pidfd_open(pid)
        try:
            return self._supervise(job_id, pid, pidfd, ready_read)
        finally:
            os.close(pidfd)
            os.close(ready_read)

    def _supervise(self, job_id: int, pid: int, pidfd: int, ready_fd: int) -> bytes:
        protocol = self.protocol
        started = None
        deadline = time.monotonic() + SETUP_DEADLINE_S
        ready_open = True
        exited = False
        while not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            watched = [pidfd, ready_fd] if ready_open else [pidfd]
            readable, _, _ = select.select(watched, [], [], remaining)
            if ready_fd in readable:
                signal_byte = os.read(ready_fd, 1)  # one byte at most: nothing else enters this process
                ready_open = False
                if signal_byte == self.child.READY and started is None:
                    started = time.monotonic()
                    deadline = started + self.timeout_s
            if pidfd in readable:
                exited = True
        ended = time.monotonic()
        duration = ended - (started or ended)
        if not exited:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            _reap(pid)
            status = protocol.TIMED_OUT if started is not None else protocol.SETUP_FAILED
            return protocol.encode_status(job_id, status, 0, duration)
        kind, detail = _reap(pid)
        if started is None:
            return protocol.encode_status(job_id, protocol.SETUP_FAILED, detail, 0.0)
        status = protocol.SIGNALED if kind == 1 else protocol.EXITED
        return protocol.encode_status(job_id, status, detail, duration)


def _receive_job(control: socket.socket) -> tuple[int, int, int] | None:
    """(job_id, job_fd, record_fd) from the pipeline, or None when it closed the socket."""
    message, fds, _, _ = socket.recv_fds(control, 64, 2)
    if not message and not fds:
        return None
    if len(message) != 4 or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        raise RuntimeError(f"malformed control message ({len(message)} bytes, {len(fds)} descriptors)")
    (job_id,) = struct.unpack("<I", message)
    return job_id, fds[0], fds[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--common-module", default="arc_pipeline.runtime.common")
    parser.add_argument("--no-audit-hook", action="store_true")
    parser.add_argument("--package-root", default=None)
    args = parser.parse_args()
    sys.argv[:] = ["arc_pipeline.sandbox.zygote"]

    # the control socket leaves fd 0, so that a stray print or read cannot touch it
    control = socket.socket(fileno=os.dup(0))
    control.setblocking(True)  # waits for the next job, whatever flags the descriptor came with
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from arc_pipeline.sandbox import isolation

    mechanisms = isolation.isolate_worker()
    if os.getppid() != args.parent_pid:
        sys.exit(1)
    _preload(args.common_module)
    iso = isolation.prepare(args.timeout_s, args.memory_mb)
    mechanisms.update(iso.mechanisms)
    mechanisms["audit hook"] = "off" if args.no_audit_hook else "names forbidden Python-level operations"
    mechanisms["job data"] = "each program process reads its own job from the pipeline; the worker holds none"
    start_dir = os.getcwd()
    os.chdir("/")
    # a program sees only the interpreter's own paths, not the pipeline's layout or working directory
    hidden = {start_dir, args.package_root}
    sys.path[:] = [entry for entry in sys.path if entry and entry not in hidden]
    zygote = Zygote(iso, args.timeout_s, not args.no_audit_hook)
    if not args.no_audit_hook:
        from arc_pipeline.sandbox import audit

        zygote.ctypes_functions = audit.loaded_ctypes_functions()
    gc.collect()
    gc.freeze()  # keeps the shared pages shared after fork
    control.send(json.dumps(mechanisms).encode())
    while True:
        try:
            job = _receive_job(control)
        except ConnectionError:
            return
        if job is None:  # the pipeline closed the socket or died
            return
        try:
            control.send(zygote.run_job(*job))
        except (BrokenPipeError, ConnectionError):
            return


if __name__ == "__main__":
    main()
