"""RingStorage's one-step writes: every row at one int slot (unrolled column writes), and the
one-row views ``single_row`` that the one-call ``add`` paths write."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.specs import FlatSpec
from recollect.storage.ring import RingStorage

SPEC = {
    "a": rc.ArraySpec((3,), np.float32),
    "b": rc.ArraySpec((), np.bool_),
    "c": rc.ArraySpec((2, 2), np.int64),
}


@settings(max_examples=30, deadline=None)
@given(envs=st.integers(1, 4), length=st.integers(1, 5), data=st.data())
def test_a_write_of_every_row_equals_per_row_writes(envs, length, data):
    ring = RingStorage(FlatSpec(SPEC), envs, length)
    ref = [np.zeros_like(a) for a in ring.arrays]  # the reference: plain [row, slot] writes
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    for _ in range(data.draw(st.integers(1, 12))):
        slot = data.draw(st.integers(0, length - 1))
        leaves = [
            rng.integers(0, 9, (envs, 3)).astype(np.float32),
            rng.random(envs) < 0.5,
            rng.integers(-5, 5, (envs, 2, 2)),
        ]
        ring.write(None, slot, leaves)
        for array, leaf in zip(ref, leaves, strict=True):
            array[:, slot] = leaf
    for got, want in zip(ring.arrays, ref, strict=True):
        assert np.array_equal(got, want)


def test_single_row_views_row_zero_and_is_empty_with_several_rows():
    one = RingStorage(FlatSpec(SPEC), 1, 4)
    assert [v.shape for v in one.single_row] == [(4, 3), (4,), (4, 2, 2)]
    one.single_row[0][2] = 7.0  # a view: the write lands in the ring
    assert one.arrays[0][0, 2].tolist() == [7.0, 7.0, 7.0]
    assert RingStorage(FlatSpec(SPEC), 2, 4).single_row == []


def test_a_write_with_a_missing_leaf_raises():
    ring = RingStorage(FlatSpec(SPEC), 2, 4)
    with pytest.raises(ValueError, match="not enough values"):
        ring.write(None, 0, [np.zeros((2, 3), np.float32)])
