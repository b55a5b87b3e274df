"""Turning a worker's reply (status, detail, duration) and a program's record into a ProgramResult.

:func:`result_from_reply` is total: every status (known or not) and every record a program's process
can write end as one program's result, never as an exception, so no program can end a stage
(tests/sandbox/test_replies.py fuzzes it).
"""

from __future__ import annotations

import signal

from arc_pipeline.sandbox import protocol
from arc_pipeline.sandbox.types import (
    INVALID_OUTPUT,
    MAX_MESSAGE_CHARS,
    TIMEOUT,
    UNSAFE,
    WORKER_CRASHED,
    ProgramResult,
)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def result_from_reply(
    status: int,
    detail: int,
    duration: float,
    record: bytes,
    n_inputs: int,
    timeout_s: float,
    max_side: int = protocol.MAX_SIDE,
) -> ProgramResult:
    def error(kind: str, message: str) -> ProgramResult:
        return ProgramResult(None, kind, message[:MAX_MESSAGE_CHARS], duration)

    if status == protocol.TIMED_OUT:
        return error(TIMEOUT, f"program exceeded the {timeout_s:g} s limit")
    if status == protocol.TOO_LARGE:
        # the pipeline stopped reading: more bytes than any valid record (a flood, forged records)
        limit = protocol.max_record_size(n_inputs, max_side)
        return error(INVALID_OUTPUT, f"the program's process wrote more than {limit} bytes as its result")
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
    # no worker sends another status; should one ever, it costs this program, not the stage
    return error(WORKER_CRASHED, f"the worker reported an unknown status {status}")
