"""The worker process: imports everything once, then forks one confined child per program.

Started by :class:`arc_pipeline.sandbox.Sandbox` as ``python -m arc_pipeline.sandbox.zygote``. It reads
job frames on its stdin and writes reply frames on its stdout (see :mod:`protocol`). It never runs
program code itself; each child is a copy of its warmed-up state, so a program starts in about a
millisecond and cannot leave anything behind for the next one.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import select
import signal
import sys
import time

PRELOADED_MODULES = (
    "math cmath itertools collections collections.abc functools copy heapq typing dataclasses enum re "
    "string time operator bisect statistics random fractions decimal numbers abc array queue json "
    "textwrap contextlib types warnings datetime struct weakref io colorsys hashlib pprint traceback "
    "inspect unicodedata numpy numpy.linalg numpy.fft numpy.random numpy.polynomial numpy.ma "
    "numpy.lib.stride_tricks"
).split()
OPTIONAL_MODULES = ("scipy", "scipy.ndimage", "scipy.signal", "scipy.spatial", "scipy.stats", "skimage")
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
    def __init__(self, isolation, timeout_s: float, audit_hook: bool) -> None:
        from arc_pipeline.sandbox import child, protocol

        self.child, self.protocol = child, protocol
        self.isolation = isolation
        self.timeout_s = timeout_s
        self.audit_hook = audit_hook
        self.devnull = os.open(os.devnull, os.O_RDWR)
        self.pid = os.getpid()

    def run_job(self, body: bytes) -> bytes:
        protocol = self.protocol
        job = protocol.decode_job(body)
        job_id, _, inputs = job
        limit = protocol.max_record_size(len(inputs))
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            self.child.run(job, write_fd, self.devnull, self.pid, self.isolation, self.audit_hook)
        os.close(write_fd)
        pidfd = os.pidfd_open(pid)
        try:
            return self._supervise(job_id, pid, pidfd, read_fd, limit)
        finally:
            os.close(pidfd)
            os.close(read_fd)

    def _supervise(self, job_id: int, pid: int, pidfd: int, read_fd: int, limit: int) -> bytes:
        protocol = self.protocol
        os.set_blocking(read_fd, False)
        buffer = bytearray()
        started = None
        deadline = time.monotonic() + SETUP_DEADLINE_S
        eof = exited = False
        status = None
        while not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = protocol.TIMED_OUT if started is not None else protocol.SETUP_FAILED
                break
            watched = [pidfd] if eof else [pidfd, read_fd]
            readable, _, _ = select.select(watched, [], [], remaining)
            if read_fd in readable:
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    eof = True
                buffer += chunk
                if started is None and buffer:
                    if buffer[:1] == self.child.READY:
                        started = time.monotonic()
                        deadline = started + self.timeout_s
                        del buffer[:1]
                    elif buffer[:1] != self.child.SETUP_FAILED:
                        status = protocol.SETUP_FAILED
                        buffer = bytearray(b"child wrote before setup finished")
                        break
                if len(buffer) > limit + 1024:
                    status = protocol.TOO_LARGE
                    break
            if pidfd in readable:
                exited = True
        ended = time.monotonic()
        if not exited:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            _reap(pid)
            record = bytes(buffer[:500]) if status == protocol.SETUP_FAILED else b""
            return protocol.encode_reply(job_id, status, 0, ended - (started or ended), record)
        while not eof:  # the child is gone: drain what it left in the pipe
            try:
                chunk = os.read(read_fd, 65536)
            except BlockingIOError:
                break
            eof = not chunk
            buffer += chunk
            if len(buffer) > limit + 1024:
                return protocol.encode_reply(job_id, protocol.TOO_LARGE, 0, ended - started, b"")
        kind, detail = _reap(pid)
        if started is None:
            reason = bytes(buffer[1:500]) if buffer[:1] == self.child.SETUP_FAILED else b"child died during setup"
            return protocol.encode_reply(job_id, protocol.SETUP_FAILED, detail, 0.0, reason)
        if len(buffer) > limit:
            return protocol.encode_reply(job_id, protocol.TOO_LARGE, 0, ended - started, b"")
        status = protocol.SIGNALED if kind == 1 else protocol.EXITED
        return protocol.encode_reply(job_id, status, detail, ended - started, bytes(buffer))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--common-module", default="arc_pipeline.runtime.common")
    parser.add_argument("--no-audit-hook", action="store_true")
    args = parser.parse_args()

    # keep the protocol pipes away from fds 0/1 so that a stray print cannot corrupt a frame
    command_in, reply_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from arc_pipeline.sandbox import isolation, protocol

    mechanisms = isolation.isolate_worker()
    if os.getppid() != args.parent_pid:
        sys.exit(1)
    _preload(args.common_module)
    iso = isolation.prepare(args.timeout_s, args.memory_mb)
    mechanisms.update(iso.mechanisms)
    mechanisms["audit hook"] = "off" if args.no_audit_hook else "names forbidden Python-level operations"
    start_dir = os.getcwd()
    os.chdir("/")
    sys.path[:] = [entry for entry in sys.path if entry and entry != start_dir]
    zygote = Zygote(iso, args.timeout_s, not args.no_audit_hook)
    gc.collect()
    gc.freeze()  # keeps the shared pages shared after fork
    protocol.write_frame(reply_out, json.dumps(mechanisms).encode())
    while True:
        body = protocol.read_frame(command_in)
        if body is None:  # the pipeline closed the pipe or died
            return
        try:
            protocol.write_frame(reply_out, zygote.run_job(body))
        except BrokenPipeError:
            return


if __name__ == "__main__":
    main()
