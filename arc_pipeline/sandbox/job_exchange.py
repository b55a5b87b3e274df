"""One program's traffic on the pipeline's side: its two pipes, its job, its record and the worker's status.

The pipeline creates a job pipe and a record pipe per program, hands the worker the program's ends over
the control socket, writes the job into one and reads the record from the other: job data never passes
through the worker (docs/sandbox.md).
"""

from __future__ import annotations

import os
import select
import socket
import time

from arc_pipeline.sandbox import protocol

#: What one exchange yields: the worker's status, its detail, the program's duration and the raw record.
Reply = tuple[int, int, float, bytes]


def _close_read_end(fd: int) -> None:
    """Put /dev/null where the pipe's read end was (the caller still closes ``fd``)."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


def exchange(
    control: socket.socket, job_id: int, body: bytes, n_inputs: int, max_side: int, deadline: float
) -> Reply | None:
    """Hand the worker the pipe ends, send the job, collect the record and the worker's status.

    None when the worker died, wedged past ``deadline`` or answered nonsense.
    """
    job_read, job_write = os.pipe()
    record_read, record_write = os.pipe()
    try:
        try:
            socket.send_fds(control, [protocol.CONTROL.pack(job_id)], [job_read, record_write])
        finally:
            os.close(job_read)
            os.close(record_write)
        try:
            protocol.write_frame(job_write, body)
        except BrokenPipeError:
            pass  # the process died before reading its job; its status says why
        os.close(job_write)
        job_write = -1
        return _collect(control, job_id, record_read, n_inputs, max_side, deadline)
    finally:
        if job_write >= 0:
            os.close(job_write)
        if record_read >= 0:
            os.close(record_read)


def _collect(
    control: socket.socket, job_id: int, record_fd: int, n_inputs: int, max_side: int, deadline: float
) -> Reply | None:
    limit = protocol.max_record_size(n_inputs, max_side)
    buffer = bytearray()
    status_message = None
    reading = True
    too_large = False
    while reading or status_message is None:
        watched = ([record_fd] if reading else []) + ([control] if status_message is None else [])
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
        if status_message is None and control in readable:
            status_message = control.recv(64)
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
