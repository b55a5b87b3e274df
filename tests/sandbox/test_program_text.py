"""extract_code / prepare_code, and the strict decoding of what a program's process sends back."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_pipeline.sandbox import SandboxConfig, extract_code, prepare_code
from arc_pipeline.sandbox.protocol import (
    ProtocolError,
    decode_job,
    decode_record,
    encode_error,
    encode_job,
    encode_outputs,
    max_record_size,
)


def test_extract_code_takes_the_first_python_block():
    text = "Reasoning\n```python\ndef transform(g):\n    return g\n```\nmore\n```python\nother\n```"
    assert extract_code(text) == "\ndef transform(g):\n    return g\n"


def test_extract_code_without_block_or_closing_fence():
    assert extract_code("no code here") is None
    assert extract_code("```py\nx\n```") is None
    assert extract_code("```python\ndef transform(g):") is None


def test_prepare_code_drops_print_and_star_import_lines():
    code = "from common import *\nimport numpy as np\n    print(x)\nx = 1  # print( in comment\ny = 2"
    assert prepare_code(code) == "import numpy as np\ny = 2"


def test_records_round_trip():
    grids = [np.array([[1, 2], [3, 9]], dtype=np.int8), np.zeros((30, 30), dtype=np.int8)]
    outputs, kind, _ = decode_record(encode_outputs(grids), 2)
    assert kind is None and [g.tolist() for g in outputs] == [g.tolist() for g in grids]
    assert decode_record(encode_error("IndexError", "x" * 1000), 1)[1:] == ("IndexError", "x" * 300)


def test_the_jobs_max_side_bounds_the_record():
    # the published rules' 35 x 35 outputs: accepted only by a job that asked for them, never beyond 35
    record = encode_outputs([np.ones((33, 35), dtype=np.int8)])
    with pytest.raises(ProtocolError, match="33 x 35 out of range"):
        decode_record(record, 1)
    assert decode_record(record, 1, max_side=35)[0][0].shape == (33, 35)
    assert max_record_size(2, 35) == 3 + 2 * (2 + 35 * 35) > max_record_size(2) == 3 + 2 * (2 + 30 * 30)
    job = encode_job(7, "code", [np.zeros((2, 3), dtype=np.int64)], max_side=35)
    assert decode_job(job)[0] == 7 and decode_job(job)[1:2] == ("code",) and decode_job(job)[3] == 35
    assert decode_job(encode_job(7, "code", [np.zeros((1, 1))]))[3] == 30
    for bad in (0, 36, 255):
        with pytest.raises(ValueError, match="max_side"):
            decode_record(record, 1, max_side=bad)
        with pytest.raises(ValueError, match="max_side"):
            encode_job(1, "code", [np.zeros((1, 1))], max_side=bad)
        with pytest.raises(ValueError, match="max_output_side"):
            SandboxConfig(max_output_side=bad)


@pytest.mark.parametrize(
    "record",
    [
        b"",
        b"O",
        b"O" + struct.pack("<H", 2) + bytes([1, 1, 3]),  # fewer grids than announced
        b"O" + struct.pack("<H", 1) + bytes([1, 1, 10]),  # colour 10
        b"O" + struct.pack("<H", 1) + bytes([31, 1]) + bytes(31),  # too tall
        b"O" + struct.pack("<H", 1) + bytes([0, 1]),  # empty
        b"O" + struct.pack("<H", 1) + bytes([1, 1, 3, 4]),  # trailing byte
        b"E" + bytes([3]) + b"a b" + struct.pack("<H", 0),  # not an identifier
        b"E" + bytes([1]) + b"A" + struct.pack("<H", 50) + b"short",
        b"X123",
    ],
)
def test_malformed_records_are_rejected(record):
    with pytest.raises(ProtocolError):
        decode_record(record, 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 3))
def test_arbitrary_bytes_never_crash_the_decoder(data, n_inputs):
    try:
        outputs, kind, message = decode_record(data, n_inputs)
    except ProtocolError:
        return
    if kind is None:
        assert len(outputs) == n_inputs
        assert all(g.dtype == np.int8 and g.min() >= 0 and g.max() <= 9 for g in outputs)
    else:
        assert kind.isidentifier() and len(message) <= 300
