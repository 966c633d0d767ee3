"""``add``'s exact-input check takes a Python ``bool``/``float`` for a 0-d bool/float64 leaf
(``is_last=False``, ``discount=1.0``): no conversion, and the same stored values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.specs import FlatSpec
from recollect.validation import exact_matcher

SPEC = {
    "discount": rc.ArraySpec((), np.float64),
    "is_last": rc.ArraySpec((), np.bool_),
    "observation": rc.ArraySpec((2,), np.float32),
    "reward": rc.ArraySpec((), np.float32),
}


HALF = np.float32(0.5)


def step(is_last, discount, reward=HALF):
    return {
        "discount": discount,
        "is_last": is_last,
        "observation": np.ones(2, np.float32),
        "reward": reward,
    }


def test_python_bool_and_float_are_exact_for_bool_and_float64_leaves():
    match = exact_matcher(FlatSpec(SPEC), ())
    leaves = match(step(True, 0.25))
    assert leaves is not None
    assert leaves[0] == 0.25 and leaves[1] is True  # as passed: nothing converted


@pytest.mark.parametrize(
    "values",
    [(1, 0.25, HALF), (True, 1, HALF), (True, True, HALF), (False, 0.25, 0.5)],
)
def test_other_python_scalars_take_the_full_check(values):
    # an int is not exact for bool or float64, a Python float not for float32
    assert exact_matcher(FlatSpec(SPEC), ())(step(*values)) is None


def test_with_the_env_dim_python_scalars_are_never_exact():
    assert exact_matcher(FlatSpec(SPEC), (1,))(step(True, 0.25)) is None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(-1e300, 1e300)), min_size=1, max_size=9))
def test_add_of_python_scalars_stores_what_add_of_arrays_stores(steps):
    a = rc.ReplayBuffer(SPEC, 4, rng=0)
    b = rc.ReplayBuffer(SPEC, 4, rng=0)
    for is_last, discount in steps:
        a.add(step(is_last, discount))
        b.add(step(np.array(is_last), np.array(discount)))
    for x, y in zip(a.storage.arrays, b.storage.arrays, strict=True):
        assert x.tobytes() == y.tobytes()
    assert a.table.clock == b.table.clock == len(steps)
    assert np.array_equal(a.table.index.last_end, b.table.index.last_end)  # the same ends
