"""Bounded binary messages between the pipeline, its workers and the programs' processes.

Nothing here is pickled: a hostile program controls every byte its process writes, so the parent
decodes them with :func:`decode_record`, which checks every length, count, shape and value and rejects
anything else. The worker that forks the programs never sees a job or a record: the pipeline hands it
two pipe ends per job and the forked process reads its job from one and writes its record to the other.
Layouts (little-endian):

- control (pipeline -> worker, one SOCK_SEQPACKET message): ``u32 job_id`` with two file descriptors
  attached, the read end of the job pipe and the write end of the record pipe.
- status (worker -> pipeline, one message): ``u32 job_id, u8 status, i32 detail, f64 duration_s``.
- job (pipeline -> program process, one frame on the job pipe):
  ``u32 job_id, u32 code_len, u16 n_inputs, u8 max_side, code, n x (u16 rows, u16 cols, cells)``;
  ``max_side`` (at most MAX_OUTPUT_SIDE_LIMIT) is the largest output side the process accepts
- record (program process -> pipeline, the whole record pipe): ``b"O", u16 n, n x (u8 rows, u8 cols,
  cells)`` for outputs, ``b"E", u8 len, type name, u16 len, utf-8 message`` for an error, or, when
  isolation could not be set up (no program code ran), ``b"F"`` and a utf-8 reason.
- frames: ``u32 length, body``.
"""

from __future__ import annotations

import os
import re
import struct

import numpy as np

from arc_pipeline.sandbox.types import MAX_MESSAGE_CHARS, MAX_OUTPUT_SIDE_LIMIT

#: Default largest output side (ARC's); a job may ask for up to MAX_OUTPUT_SIDE_LIMIT.
MAX_SIDE = 30
MAX_FRAME = 64 * 1024 * 1024
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

# statuses the worker reports
EXITED = 0  # detail: exit code
SIGNALED = 1  # detail: signal number
TIMED_OUT = 2
TOO_LARGE = 3  # decided by the pipeline, which stops reading a record longer than any valid one
SETUP_FAILED = 4  # the record pipe holds b"F" and the reason, if the process got that far

#: First byte of the record when isolation setup failed.
SETUP_FAILED_RECORD = b"F"

_JOB_HEAD = struct.Struct("<IIHB")
_REPLY_HEAD = struct.Struct("<IBid")
CONTROL = struct.Struct("<I")
_LEN = struct.Struct("<I")


class ProtocolError(ValueError):
    """Bytes that do not follow the layout; the message says what is wrong."""


def _check_side(max_side: int) -> int:
    if not 1 <= max_side <= MAX_OUTPUT_SIDE_LIMIT:
        raise ValueError(f"max_side must be in 1..{MAX_OUTPUT_SIDE_LIMIT}, got {max_side}")
    return max_side


def encode_job(job_id: int, code: str, inputs: list[np.ndarray], max_side: int = MAX_SIDE) -> bytes:
    code_bytes = code.encode("utf-8", errors="surrogatepass")
    parts = [_JOB_HEAD.pack(job_id, len(code_bytes), len(inputs), _check_side(max_side)), code_bytes]
    for index, grid in enumerate(inputs):
        array = np.asarray(grid)
        if array.ndim != 2 or array.size == 0 or max(array.shape) > 0xFFFF:
            raise ValueError(f"input {index} is not a non-empty 2-D grid (shape {array.shape})")
        if array.min() < -128 or array.max() > 127:
            raise ValueError(f"input {index} has values outside int8")
        parts.append(struct.pack("<HH", *array.shape))
        parts.append(np.ascontiguousarray(array, dtype=np.int8).tobytes())
    return b"".join(parts)


def decode_job(body: bytes) -> tuple[int, str, list[np.ndarray], int]:
    """Program process side (trusted sender): the job id, the code, the inputs as int64 arrays (like BARC)
    and the largest output side to accept."""
    job_id, code_len, n_inputs, max_side = _JOB_HEAD.unpack_from(body, 0)
    offset = _JOB_HEAD.size
    code = body[offset : offset + code_len].decode("utf-8", errors="surrogatepass")
    offset += code_len
    inputs = []
    for _ in range(n_inputs):
        rows, cols = struct.unpack_from("<HH", body, offset)
        offset += 4
        cells = np.frombuffer(body, dtype=np.int8, count=rows * cols, offset=offset)
        offset += rows * cols
        inputs.append(cells.reshape(rows, cols).astype(np.int64))
    return job_id, code, inputs, max_side


def encode_status(job_id: int, status: int, detail: int, duration_s: float) -> bytes:
    return _REPLY_HEAD.pack(job_id, status, detail, duration_s)


def decode_status(body: bytes) -> tuple[int, int, int, float]:
    if len(body) != _REPLY_HEAD.size:
        raise ProtocolError(f"status of {len(body)} bytes, expected {_REPLY_HEAD.size}")
    return _REPLY_HEAD.unpack(body)


def max_record_size(n_inputs: int, max_side: int = MAX_SIDE) -> int:
    error_record = max(1 + 1 + 64 + 2 + 4 * MAX_MESSAGE_CHARS, 1 + 500)
    return max(error_record, 3 + n_inputs * (2 + _check_side(max_side) ** 2))


def encode_outputs(grids: list[np.ndarray]) -> bytes:
    """Child side: grids already validated as int8, at most the job's max_side a side."""
    parts = [b"O", struct.pack("<H", len(grids))]
    for grid in grids:
        parts.append(struct.pack("<BB", *grid.shape))
        parts.append(grid.tobytes())
    return b"".join(parts)


def encode_error(type_name: str, message: str) -> bytes:
    name = type_name.encode("ascii", errors="replace")[:64]
    text = message[:MAX_MESSAGE_CHARS].encode("utf-8", errors="replace")
    return b"E" + struct.pack("<B", len(name)) + name + struct.pack("<H", len(text)) + text


def decode_record(
    record: bytes, n_inputs: int, max_side: int = MAX_SIDE
) -> tuple[list[np.ndarray] | None, str | None, str | None]:
    """Parent side, untrusted bytes: (outputs, None, None) or (None, error_type, message).

    ``max_side`` is the job's: a grid larger than the job allowed is malformed."""
    _check_side(max_side)
    if not record:
        raise ProtocolError("empty record")
    kind = record[:1]
    if kind == b"O":
        if len(record) < 3:
            raise ProtocolError("truncated output header")
        (count,) = struct.unpack_from("<H", record, 1)
        if count != n_inputs:
            raise ProtocolError(f"{count} outputs for {n_inputs} inputs")
        offset, grids = 3, []
        for _ in range(count):
            if offset + 2 > len(record):
                raise ProtocolError("truncated grid header")
            rows, cols = record[offset], record[offset + 1]
            offset += 2
            if not (1 <= rows <= max_side and 1 <= cols <= max_side):
                raise ProtocolError(f"grid shape {rows} x {cols} out of range")
            if offset + rows * cols > len(record):
                raise ProtocolError("truncated grid cells")
            cells = np.frombuffer(record, dtype=np.int8, count=rows * cols, offset=offset)
            offset += rows * cols
            if cells.min() < 0 or cells.max() > 9:
                raise ProtocolError("cell values outside 0..9")
            grids.append(cells.reshape(rows, cols).copy())
        if offset != len(record):
            raise ProtocolError(f"{len(record) - offset} trailing bytes")
        return grids, None, None
    if kind == b"E":
        if len(record) < 2:
            raise ProtocolError("truncated error header")
        name_len = record[1]
        name_end = 2 + name_len
        if name_end + 2 > len(record):
            raise ProtocolError("truncated error type")
        name = record[2:name_end].decode("ascii", errors="replace")
        if not _TYPE_NAME.fullmatch(name):
            raise ProtocolError("error type is not an identifier")
        (text_len,) = struct.unpack_from("<H", record, name_end)
        if name_end + 2 + text_len != len(record) or text_len > 4 * MAX_MESSAGE_CHARS:
            raise ProtocolError("bad error message length")
        message = record[name_end + 2 :].decode("utf-8", errors="replace")[:MAX_MESSAGE_CHARS]
        return None, name, message
    raise ProtocolError(f"unknown record kind {kind!r}")


def write_frame(fd: int, body: bytes) -> None:
    view = memoryview(_LEN.pack(len(body)) + body)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exact(fd: int, size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None at end of stream."""
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes | None:
    head = read_exact(fd, _LEN.size)
    if head is None:
        return None
    (length,) = _LEN.unpack(head)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    return read_exact(fd, length) if length else b""
