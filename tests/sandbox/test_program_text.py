"""extract_code / prepare_code, and the strict decoding of what a program's process sends back."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from arc_pipeline.sandbox import extract_code, prepare_code
from arc_pipeline.sandbox.protocol import ProtocolError, decode_record, encode_error, encode_outputs


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
