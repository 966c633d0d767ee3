"""The transport's message format: every dtype and nest round-trips exactly; nothing else passes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from recollect.errors import InvalidArgumentTypeError
from recollect.grpc import WireFormatError, decode, encode
from reverb_dtypes import NUMERIC_DTYPES

# every dtype Reverb carries (its 18: bool, int8-64, uint8-64, float16/32/64,
# complex64/128, bytes, str), a big-endian one and datetime/timedelta
DTYPES = [
    *NUMERIC_DTYPES,
    "S7",
    "U5",
    ">i4",
    "M8[ns]",
    "m8[s]",
]


def assert_same(got, expected):
    """Equal structure, types, dtypes, shapes and values (NaN equals NaN)."""
    assert type(got) is type(expected), (type(got), type(expected))
    if isinstance(expected, dict):
        assert list(got) == list(expected)
        for key in expected:
            assert_same(got[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_same(a, b)
    elif isinstance(expected, np.ndarray | np.generic):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    elif isinstance(expected, float) and expected != expected:
        assert got != got
    else:
        assert got == expected


def sample_array(dtype, shape=(3, 2)):
    dtype = np.dtype(dtype)
    values = np.arange(int(np.prod(shape))).reshape(shape)
    if dtype.kind == "S":
        return np.char.add(values.astype(dtype), b"x")
    if dtype.kind == "U":
        return np.char.add(values.astype(dtype), "é")
    if dtype.kind == "c":
        return (values + 1j * (values + 3)).astype(dtype)
    if dtype.kind in "mM":
        return values.astype(np.int64).astype(dtype)
    return (values % 2 == 1 if dtype.kind == "b" else values).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 2), (2, 0, 3)], ids=str)
def test_every_dtype_and_shape_round_trips(dtype, shape):
    array = sample_array(dtype, shape) if 0 not in shape else np.zeros(shape, dtype)
    got = decode(encode({"x": array}))["x"]
    assert_same(got, array)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_numpy_scalars_come_back_as_numpy_scalars(dtype):
    scalar = sample_array(dtype, (2,))[1]
    assert isinstance(scalar, np.generic)
    assert_same(decode(encode(scalar)), scalar)


def _bytes_array(values, shape):
    array = np.empty(len(values), object)
    array[:] = values
    return array.reshape(shape)


@pytest.mark.parametrize(
    ("values", "shape"),
    [
        ([b"one"], ()),
        ([], (0,)),
        ([], (2, 0)),
        ([b"a", b"", b"\x00\xff"], (3,)),
        ([b"ab", b"c", "é".encode(), b""], (2, 2)),
    ],
    ids=str,
)
def test_object_arrays_of_bytes_round_trip(values, shape):
    """How Reverb holds str and bytes columns: object arrays of bytes."""
    array = _bytes_array(values, shape)
    got = decode(encode({"strings": array}))["strings"]
    assert_same(got, array)
    assert [type(v) for v in got.reshape(-1)] == [bytes] * len(values)
    assert not got.flags.writeable


def test_object_array_lengths_that_do_not_add_up_are_malformed():
    message = encode(_bytes_array([b"abc"], (1,)))
    assert message.count(b'"n":3') == 1
    with pytest.raises(WireFormatError, match=r"object array of shape \(1,\) has element lengths"):
        decode(message.replace(b'"n":3', b'"n":4'))


def test_nests_and_python_values_round_trip_with_their_types():
    value = {
        "obs": {"camera": np.zeros((2, 4, 4, 3), np.uint8), "joints": np.ones(7, np.float32)},
        "tuple": (1, -(2**70), 2.5, float("nan"), float("inf"), -float("inf"), True, None),
        "list": [b"raw\x00bytes", "text ü", [], (), {}],
        "empty": {},
        "": "empty key",
    }
    assert_same(decode(encode(value)), value)


def test_non_contiguous_and_big_endian_arrays_keep_their_values():
    base = np.arange(24, dtype=">f8").reshape(4, 6)
    for array in (base.T, base[::2, 1::3], base[:, ::-1]):
        assert_same(decode(encode(array)), np.array(array))


def test_decoded_arrays_are_read_only_views_aligned_to_64_bytes():
    message = encode({"a": np.arange(3, dtype=np.int8), "b": np.arange(5, dtype=np.float64)})
    got = decode(message)
    for array in got.values():
        assert not array.flags.writeable
        assert array.flags.aligned
        assert np.shares_memory(array, np.frombuffer(message, np.uint8))


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        hnp.arrays(
            st.sampled_from(DTYPES),
            hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
        )
        | st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=True)
        | st.text(max_size=5)
        | st.binary(max_size=9),
        lambda children: (
            st.lists(children, max_size=3)
            | st.lists(children, max_size=3).map(tuple)
            | st.dictionaries(st.text(max_size=4), children, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_any_nest_round_trips(value):
    assert_same(decode(encode(value)), value)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"a": [1, {"b": object()}]}, r"builtins\.object at '/a/1/b'"),
        ({"a": {1: 2}}, r"dict at '/a': its key 1 is a int; dict keys must be str"),
        ({"x": np.array([object()])}, r"object array at '/x': it holds a object"),
        ({"x": np.array([b"a", "b"], object)}, r"object array at '/x': it holds a str \('b'\)"),
        ({"x": np.zeros(2, [("f", "i4")])}, r"array at '/x': dtype .* is not carried"),
        ({"s": {1, 2}}, r"builtins\.set at '/s'"),
        ({"b": bytearray(b"x")}, r"builtins\.bytearray at '/b'"),
    ],
)
def test_values_the_transport_does_not_carry_are_refused_with_their_path(value, match):
    with pytest.raises(InvalidArgumentTypeError, match=match):
        encode(value)


def test_a_namedtuple_is_refused_rather_than_returned_as_a_plain_tuple():
    from collections import namedtuple

    Step = namedtuple("Step", "obs reward")
    with pytest.raises(InvalidArgumentTypeError, match=r"Step at '/0'.*namedtuple"):
        encode([Step(1, 2)])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"RC", r"2 bytes, shorter than the 8-byte prefix"),
        (b"XXXX\x00\x00\x00\x00", r"starts with b'XXXX', expected b'RCG1'"),
        (b"RCG1\xff\x00\x00\x00{}", r"header claims 255 bytes, but the message has 10"),
        (b"RCG1\x02\x00\x00\x00{]", r"its header is not JSON"),
        (b'RCG1\x07\x00\x00\x00{"q":1}', r"unknown node \['q'\]"),
    ],
)
def test_malformed_messages_raise_wire_format_errors(data, match):
    with pytest.raises(WireFormatError, match=match):
        decode(data)


@pytest.mark.parametrize(
    "node",
    [
        b'{"a":"<f8","s":[1000000000000],"n":0}',
        b'{"a":"<f8","s":[4],"n":8,"o":0}',
        b'{"a":"<f8","s":[-1],"n":-8,"o":0}',
    ],
)
def test_an_array_whose_shape_and_size_disagree_is_refused(node):
    message = b"RCG1" + len(node).to_bytes(4, "little") + node
    message += bytes(-len(message) % 64 + 64)
    with pytest.raises(WireFormatError, match=r"malformed message: an array of shape"):
        decode(message)


def test_a_leaf_whose_bytes_run_past_the_message_is_refused():
    message = encode(np.arange(16, dtype=np.int64))
    with pytest.raises(WireFormatError, match=r"run past its end"):
        decode(message[:-8])


@pytest.mark.parametrize("installed", [None, "a folder named grpc"])
def test_without_grpcio_serve_and_connect_name_the_extra(monkeypatch, installed):
    import sys
    import types

    from recollect.extras import MissingExtraError
    from recollect.grpc import connect, serve
    from recollect.grpc.options import load_grpc

    fake = None if installed is None else types.ModuleType("grpc")  # no grpc.server
    monkeypatch.setitem(sys.modules, "grpc", fake)
    load_grpc.cache_clear()
    try:
        with pytest.raises(MissingExtraError, match=r'pip install "recollect\[reverb\]"'):
            serve(object())
        with pytest.raises(MissingExtraError, match=r"recollect.grpc needs grpc"):
            connect("127.0.0.1:1").call("noop", {})
    finally:
        load_grpc.cache_clear()
