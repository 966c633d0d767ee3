"""``ReplayBuffer.add`` (one env row): exact input skips conversion, anything else is checked.

The short path writes a step whose leaves already have the spec's shapes and
dtypes (numpy scalars allowed for 0-d leaves) straight into the ring; every
other step goes through ``convert_step`` and raises the same errors as before.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recollect as rc
import recollect.buffers.writes as write_path
from recollect.errors import DTypeError, ShapeError, SpecError

SPEC = {
    "observation": rc.ArraySpec((3,), np.float32),
    "reward": rc.ArraySpec((), np.float32),
    "done": rc.ArraySpec((), np.bool_),
}


def steps(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "observation": rng.standard_normal(3).astype(np.float32),
            "reward": np.float32(rng.standard_normal()),  # a numpy scalar
            "done": rng.random() < 0.3,  # a Python bool: the converting path
        }
        for _ in range(n)
    ]


def stored(buf: rc.ReplayBuffer) -> dict:
    return buf.gather_all()


def test_exact_steps_skip_conversion(monkeypatch):
    buf = rc.ReplayBuffer(SPEC, 8, rng=0)

    def refuse(*args, **kwargs):
        raise AssertionError("convert_step called for an exact step")

    monkeypatch.setattr(write_path, "convert_step", refuse)
    step = {"observation": np.ones(3, np.float32), "reward": np.float32(2), "done": np.bool_(1)}
    buf.add(step)
    buf.add({**step, "reward": np.array(3, np.float32)})  # a 0-d array is exact too
    got = stored(buf)
    assert got["reward"].tolist() == [[2.0, 3.0]] and got["done"].tolist() == [[True, True]]


def test_mixed_steps_store_what_a_list_reference_holds():
    buf = rc.ReplayBuffer(SPEC, 8, rng=0)
    reference = []
    for step in steps(13):
        buf.add(step)
        reference.append(step)
    got = stored(buf)
    want = reference[-8:]
    np.testing.assert_array_equal(got["observation"][0], [s["observation"] for s in want])
    np.testing.assert_array_equal(got["reward"][0], [s["reward"] for s in want])
    np.testing.assert_array_equal(got["done"][0], [s["done"] for s in want])


@pytest.mark.parametrize(
    ("step", "error", "match"),
    [
        ({"observation": np.ones(4, np.float32)}, ShapeError, "observation"),
        ({"reward": np.ones(2, np.float32)}, ShapeError, "reward"),
        ({"done": np.float64(0.5)}, DTypeError, "done"),
        ({"extra": np.ones(1)}, SpecError, "extra"),
    ],
)
def test_bad_steps_raise_as_before_and_write_nothing(step, error, match):
    buf = rc.ReplayBuffer(SPEC, 8, rng=0)
    good = steps(1)[0]
    buf.add(good)
    with pytest.raises(error, match=match):
        buf.add({**good, **step})
    assert buf.num_frames() == 1


def test_non_native_byte_order_is_converted_not_matched():
    spec = {"x": rc.ArraySpec((), np.dtype(">f4"))}
    buf = rc.ReplayBuffer(spec, 4, rng=0)
    buf.add({"x": np.float32(1.5)})  # native scalar: converted to the spec's byte order
    assert stored(buf)["x"].dtype == np.dtype(">f4")
    assert stored(buf)["x"].tolist() == [[1.5]]


EPISODE_SPEC = {
    "observation": rc.ArraySpec((2,), np.float32),
    "reward": rc.ArraySpec((), np.float32),
    "is_last": rc.ArraySpec((), np.bool_),
}


def _sampler(name: str):
    if name == "uniform":
        return None
    return rc.Prioritized(0.6, importance_sampling_exponent=0.4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ends=st.lists(st.booleans(), min_size=3, max_size=40),
    capacity=st.integers(3, 12),
    sampler=st.sampled_from(["uniform", "prioritized"]),
    max_times_sampled=st.sampled_from([0, 2]),
)
def test_add_matches_add_batch_of_one_row(ends, capacity, sampler, max_times_sampled):
    """The short path (``add`` of exact steps: no [1] arrays, ``Table.insert_one``) leaves
    the buffer exactly as ``add_batch`` of the same steps with an env dim of 1: stored
    steps, episode ends (valid windows), priorities, times sampled and later samples."""
    kwargs = {"rng": 3, "max_times_sampled": max_times_sampled, "sequence_length": 2}
    short = rc.ReplayBuffer(EPISODE_SPEC, capacity, sampler=_sampler(sampler), **kwargs)
    general = rc.ReplayBuffer(EPISODE_SPEC, capacity, sampler=_sampler(sampler), **kwargs)
    for t, end in enumerate(ends):
        step = {
            "observation": np.full(2, t, np.float32),
            "reward": np.float32(t),
            "is_last": np.bool_(end),
        }
        short.add(step)
        general.add_batch({k: np.asarray(v)[None] for k, v in step.items()})
        if t % 5 == 4:  # samples between writes: times sampled and priorities move
            draws = [b.num_frames() and _sample_or_none(b) for b in (short, general)]
            _assert_same_sample(*draws)
    for a, b in zip(short.gather_all().values(), general.gather_all().values(), strict=True):
        np.testing.assert_array_equal(a, b)
    _assert_same_sample(_sample_or_none(short), _sample_or_none(general))


def _sample_or_none(buf: rc.ReplayBuffer):
    try:
        return buf.sample(4, num_steps=2)
    except rc.errors.NotEnoughDataError:
        return None


def _assert_same_sample(a, b) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.data["observation"], b.data["observation"])
        np.testing.assert_array_equal(a.probabilities, b.probabilities)
