"""The wire's encoding of requests and replies: header values plus raw array buffers, no
pickle (what any transport between processes carries; issue 37 item 2, issue 38's gRPC)."""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import recollect as rc
from recollect.errors import (
    CheckpointError,
    RateLimiterTimeout,
    ShapeError,
    StateError,
)
from recollect.service import Server
from recollect.service.wire import codec
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Raised

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}
Point = collections.namedtuple("Point", "x y")


def roundtrip(value):
    return codec.unpack(bytearray(codec.packed(value)))


def same(a, b) -> None:
    """Equal values of equal types, arrays compared by dtype, shape and content."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


ARRAYS = hnp.arrays(
    st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_, np.int16, ">f4"]),
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)


@settings(max_examples=60, deadline=None)
@given(arrays=st.lists(ARRAYS, max_size=4), step=st.integers(1, 2))
def test_arrays_travel_as_raw_buffers_and_come_back_equal_and_writable(arrays, step) -> None:
    views = [a[::step] if a.ndim else a for a in arrays]  # non-contiguous ones too
    header, buffers = codec.encode(views)
    assert len(buffers) == len(views)
    assert (b'"nd"' in header) == bool(views)
    assert all(isinstance(b, memoryview) for b in buffers)
    back = roundtrip(views)
    same(back, views)
    assert [b.shape for b in back] == [v.shape for v in views]
    assert all(b.flags.writeable for b in back)


def test_every_request_and_reply_round_trips_without_pickle(monkeypatch) -> None:
    server = Server(
        {"t": rc.ReplayBuffer(SPEC, 64, 2, sampler=rc.Prioritized(), sequence_length=1)}
    )
    shard = server.shards["t"][0]

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "dumps", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)

    def call(request):
        got = roundtrip(request)
        assert type(got) is type(request)
        for field in dataclasses.fields(request):
            same(getattr(got, field.name), getattr(request, field.name))
        return codec.answer(codec.respond(shard, codec.packed(request)))

    description = call(rq.Describe())
    assert description == shard.describe()
    lease, rows = call(rq.Reserve(2, "host", os.getpid()))
    same(rows, np.arange(2))
    leaves = [np.ones((2, 6), bool), np.arange(36, dtype=np.float32).reshape(2, 6, 3)]
    assert call(rq.Extend(lease, leaves, None, 0)) == 12
    call(rq.CheckLease(lease))
    drawn = call(rq.SampleBatches([3, 2], None, 1.0, {"importance_sampling_exponent": 0.5}))
    want = shard.buffer.reader.gather_row(0)
    assert drawn.sample.data["obs"].shape == (5, 3) and drawn.error is None
    assert set(drawn.sample.data) == {"obs", "is_last"}
    assert drawn.sample.data["obs"].dtype == want["obs"].dtype
    weight, size = call(rq.SamplingWeight(None, (drawn.sample.ids, np.full(5, 2.0))))
    assert size == shard.buffer.info().size and weight > 0
    assert len(call(rq.SamplingBounds())) == 3
    assert call(rq.UpdatePriorities(drawn.sample.ids, np.full(5, 3.0))) == 0
    assert call(rq.WeightNormalization()) == "buffer"
    assert call(rq.Delete(drawn.sample.ids[:1])) in (0, 1)
    info = call(rq.Info())
    assert info == shard.info() and info.inserts == 12
    call(rq.Cancel(7))
    call(rq.Reset())
    call(rq.Release(lease))


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (RateLimiterTimeout("waited timeout=1s"), RateLimiterTimeout),
        (ShapeError("leaf 'obs'"), ShapeError),
        (CheckpointError("damaged"), CheckpointError),
        (KeyError("k"), KeyError),
        (ZeroDivisionError("zero"), ZeroDivisionError),
    ],
)
def test_errors_keep_their_type_and_message(error, kind) -> None:
    back = roundtrip(Raised(error)).error
    assert type(back) is kind and str(back) == str(error)


def test_an_error_of_an_unknown_type_arrives_as_a_state_error_naming_it() -> None:
    class Local(Exception):
        pass

    back = roundtrip(Raised(Local("boom"))).error
    assert type(back) is StateError
    with pytest.raises(StateError, match=r"^the shard raised Local: boom$"):
        raise back


def test_nests_scalars_and_namedtuples_round_trip() -> None:
    value = {
        "a": Point(np.arange(3), 2.5),
        3: (b"xy", np.float32(1.5), np.dtype("<i2"), None, True, float("nan")),
        "spec": rc.ArraySpec((2, 3), np.uint8, "frame"),
    }
    back = roundtrip(value)
    same(back, value)
    assert type(back["a"]) is Point  # a class this process knows comes back as itself


def test_a_namedtuple_class_this_process_does_not_know_comes_back_with_its_fields() -> None:
    header, buffers = codec.encode(Point(1, 2))
    header = header.replace(b'"m":"' + Point.__module__.encode(), b'"m":"nowhere')
    back = codec.decode(header, buffers)
    assert type(back) is not Point and back._fields == ("x", "y") and tuple(back) == (1, 2)


def test_values_the_wire_does_not_carry_are_refused_with_a_message() -> None:
    with pytest.raises(codec.CodecError, match=r"cannot send an array of dtype object"):
        codec.encode(np.array([object()]))
    with pytest.raises(codec.CodecError, match=r"cannot send a value of type builtins\.set"):
        codec.encode({1, 2})


def test_an_answer_the_wire_cannot_carry_comes_back_as_a_state_error() -> None:
    class Odd:
        table, index = "t", 0

        def describe(self):
            return {1, 2}

    with pytest.raises(StateError, match=r"answer could not be sent back .*builtins\.set"):
        codec.answer(codec.respond(Odd(), codec.packed(rq.Describe())))


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (b"", r"shorter than the wire's header"),
        (pickle.dumps(rq.Info()), r"does not start with b'RCW1'"),
        (codec.packed([np.zeros(100)])[:-400], r"cut short \(an array's bytes are missing\)"),
        (codec.packed(rq.Info()).replace(b'"Info"', b'"Nope"'), r"damaged or of another version"),
    ],
    ids=["empty", "pickle", "cut", "unknown-kind"],
)
def test_a_damaged_or_foreign_message_raises_codec_error(message, match) -> None:
    with pytest.raises(codec.CodecError, match=match):
        codec.unpack(message)


def test_a_damaged_request_is_answered_with_the_error_not_applied() -> None:
    server = Server({"t": rc.ReplayBuffer(SPEC, 64, 2)})
    answer = codec.respond(server.shards["t"][0], b"RCW1garbage")
    with pytest.raises(codec.CodecError, match=r"a message of 11 bytes is shorter"):
        codec.answer(answer)
