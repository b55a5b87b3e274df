"""Property tests: no status and no bytes a program's process writes make the reply decoding raise.

``result_from_reply`` turns the worker's status and the raw record into one program's result; a raise
there ended the whole execute stage (issue 23: a record over the size limit). These tests draw
arbitrary statuses, details, durations and records (random bytes, valid records, valid records cut
short, grown or with one byte changed) and check that the result is always a per-program outcome whose
error type the error tables can name.
"""

from __future__ import annotations

import math
import signal
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_pipeline.sandbox import protocol
from arc_pipeline.sandbox.replies import result_from_reply
from arc_pipeline.sandbox.types import (
    INVALID_OUTPUT,
    MAX_MESSAGE_CHARS,
    TIMEOUT,
    UNSAFE,
    WORKER_CRASHED,
    ProgramResult,
)
from arc_pipeline.schemas import ERROR_TYPE_COLUMNS

#: What the sandbox itself records; any other name comes from an error record the program wrote.
SANDBOX_ERRORS = {TIMEOUT, INVALID_OUTPUT, WORKER_CRASHED, UNSAFE}


@st.composite
def grids(draw, max_side: int = 35) -> np.ndarray:
    rows = draw(st.integers(1, max_side))
    cols = draw(st.integers(1, max_side))
    cells = draw(st.binary(min_size=rows * cols, max_size=rows * cols))
    return (np.frombuffer(cells, dtype=np.uint8) % 10).astype(np.int8).reshape(rows, cols)


@st.composite
def records(draw) -> bytes:
    """Bytes near the layout as well as far from it: where a decoder's corner cases are."""
    base = draw(
        st.one_of(
            st.binary(max_size=300),
            st.lists(grids(), max_size=3).map(protocol.encode_outputs),
            st.tuples(st.text(max_size=80), st.text(max_size=400)).map(lambda pair: protocol.encode_error(*pair)),
            st.binary(max_size=600).map(lambda tail: protocol.SETUP_FAILED_RECORD + tail),
            st.integers(0, 0xFFFF).map(lambda count: b"O" + struct.pack("<H", count)),
        )
    )
    change = draw(st.sampled_from(["keep", "cut", "grow", "flip"]))
    if change == "cut" and base:
        return base[: draw(st.integers(0, len(base) - 1))]
    if change == "grow":
        return base + draw(st.binary(min_size=1, max_size=50))
    if change == "flip" and base:
        index = draw(st.integers(0, len(base) - 1))
        return base[:index] + bytes([draw(st.integers(0, 255))]) + base[index + 1 :]
    return base


STATUSES = st.one_of(
    st.sampled_from(
        [protocol.EXITED, protocol.SIGNALED, protocol.TIMED_OUT, protocol.TOO_LARGE, protocol.SETUP_FAILED]
    ),
    st.integers(0, 255),  # the status field is one byte
    st.integers(-(2**31), 2**31),
)
DETAILS = st.one_of(
    st.sampled_from([0, 1, int(signal.SIGSYS), int(signal.SIGXCPU), int(signal.SIGXFSZ), int(signal.SIGKILL)]),
    st.integers(-(2**31), 2**31 - 1),
)


def assert_per_program_outcome(result: ProgramResult, n_inputs: int, max_side: int) -> None:
    assert isinstance(result, ProgramResult)
    if result.error_type is None:
        assert result.outputs is not None and len(result.outputs) == n_inputs
        for grid in result.outputs:
            assert grid.dtype == np.int8 and grid.ndim == 2
            assert 1 <= min(grid.shape) and max(grid.shape) <= max_side
            assert grid.min() >= 0 and grid.max() <= 9
    else:
        assert result.outputs is None
        assert len(result.error_message) <= MAX_MESSAGE_CHARS
        # a name of the sandbox's own, or a program's exception name: an identifier the tables count
        # under its own column or under "other"
        assert result.error_type in SANDBOX_ERRORS or result.error_type.isidentifier()
        assert result.error_type not in SANDBOX_ERRORS or result.error_type in ERROR_TYPE_COLUMNS


@settings(max_examples=400, deadline=None)
@given(
    STATUSES,
    DETAILS,
    st.floats(allow_nan=True, allow_infinity=True),
    records(),
    st.integers(0, 4),
    st.integers(1, 35),
)
def test_every_status_and_record_is_one_programs_result(status, detail, duration, record, n_inputs, max_side):
    result = result_from_reply(status, detail, duration, record, n_inputs, 1.0, max_side)
    assert_per_program_outcome(result, n_inputs, max_side)
    known = {protocol.EXITED, protocol.SIGNALED, protocol.TIMED_OUT, protocol.TOO_LARGE, protocol.SETUP_FAILED}
    if status not in known:
        assert result.error_type == WORKER_CRASHED and str(status) in result.error_message
    if status != protocol.EXITED:
        assert result.error_type in SANDBOX_ERRORS  # the record cannot choose the label
    if not math.isnan(duration):
        assert result.duration_s == duration


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000), st.integers(0, 4), st.integers(1, 35))
def test_a_record_over_the_limit_is_invalid_output(record, n_inputs, max_side):
    """TOO_LARGE is what the pipeline reports when it stopped reading a flood: whatever was read, the
    program gets InvalidOutput, and the message names the limit."""
    result = result_from_reply(protocol.TOO_LARGE, 0, 0.1, record, n_inputs, 1.0, max_side)
    assert result.error_type == INVALID_OUTPUT and result.outputs is None
    assert str(protocol.max_record_size(n_inputs, max_side)) in result.error_message


@settings(max_examples=300, deadline=None)
@given(records(), st.integers(0, 4), st.integers(1, 35))
def test_the_decoder_raises_only_its_own_error(record, n_inputs, max_side):
    try:
        outputs, kind, message = protocol.decode_record(record, n_inputs, max_side)
    except protocol.ProtocolError:
        return
    if kind is None:
        assert len(outputs) == n_inputs
        assert all(max(grid.shape) <= max_side and grid.min() >= 0 and grid.max() <= 9 for grid in outputs)
    else:
        assert outputs is None and kind.isidentifier() and len(message) <= MAX_MESSAGE_CHARS


def test_valid_records_still_decode():
    """The totality above is not bought by rejecting good records."""
    grid = np.array([[1, 2], [3, 4]], dtype=np.int8)
    result = result_from_reply(protocol.EXITED, 0, 0.1, protocol.encode_outputs([grid]), 1, 1.0)
    assert result.error_type is None and result.outputs[0].tolist() == [[1, 2], [3, 4]]
    result = result_from_reply(protocol.EXITED, 0, 0.1, protocol.encode_error("IndexError", "boom"), 1, 1.0)
    assert (result.error_type, result.error_message) == ("IndexError", "boom")
