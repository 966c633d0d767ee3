"""``Sample`` reads like its data: items, attributes and a short repr (issue #14, item 18)."""

from __future__ import annotations

import collections
import copy
import pickle

import numpy as np
import pytest

import recollect as rc
from recollect.buffers.sample import Sample, nest_repr

SPEC = {
    "observation": {
        "camera": rc.ArraySpec((4, 4), np.uint8),
        "state": rc.ArraySpec((3,), np.float32),
    },
    "action": rc.ArraySpec((), np.int64),
    "ids": rc.ArraySpec((), np.int32),  # a data key named like a metadata field
}


def sample(batch=5, num_steps=2) -> Sample:
    buf = rc.ReplayBuffer(SPEC, 40, rng=0)
    for _ in range(6):
        buf.add(optree_zeros())
    return buf.sample(batch, num_steps)


def optree_zeros():
    return {
        "observation": {"camera": np.zeros((4, 4), np.uint8), "state": np.zeros(3, np.float32)},
        "action": np.int64(0),
        "ids": np.int32(7),
    }


def test_items_and_attributes_reach_the_data_leaves():
    s = sample()
    assert s["action"] is s.data["action"]
    assert s.action is s.data["action"]
    assert s.observation["camera"].shape == (5, 2, 4, 4)
    assert s["observation/state"] is s.data["observation"]["state"]  # leaf paths work too
    assert s.ids.dtype == np.int64  # metadata fields win attribute lookup...
    assert s["ids"].dtype == np.int32  # ...items always read the data


def test_unknown_names_say_what_exists():
    s = sample()
    with pytest.raises(
        AttributeError,
        match=r"no attribute 'reward'.*data keys: \['action', 'ids', 'observation'\]",
    ):
        _ = s.reward
    with pytest.raises(
        KeyError, match=r"no data leaf 'reward'.*\['action', 'ids', 'observation'\]"
    ):
        s["reward"]
    assert not hasattr(s, "reward")


def test_tuple_and_namedtuple_data():
    Step = collections.namedtuple("Step", ["obs", "done"])
    s = Sample(Step(np.zeros((2, 3)), np.zeros(2, bool)), np.zeros(2, np.int64), np.ones(2))
    assert s.obs is s.data.obs and s[1] is s.data.done and s["done"] is s.data.done


def test_copy_and_pickle_still_work():
    s = sample()
    assert copy.copy(s).action is s.action
    restored = pickle.loads(pickle.dumps(s))
    np.testing.assert_array_equal(restored.action, s.action)


def test_repr_shows_shapes_and_dtypes_not_values():
    s = sample(batch=64)
    text = repr(s)
    assert text.startswith("Sample(data={'observation': {'camera': uint8[64, 2, 4, 4], ")
    assert "'action': int64[64, 2], 'ids': int32[64, 2]}" in text
    assert "ids=int64[64], probabilities=float64[64], weights=None" in text
    assert len(text) < 400 and "0, 0" not in text


def test_nest_repr_of_any_dataclass_like_object():
    class Thing:
        def __init__(self):
            self.a, self.b, self.n = np.zeros((2, 3), np.float16), {"x": (np.ones(2),)}, 7

    assert (
        nest_repr(Thing(), ["a", "b", "n"]) == "Thing(a=float16[2, 3], b={'x': (float64[2],)}, n=7)"
    )


def test_transition_sample_repr_is_short():
    buf = rc.TransitionBuffer(100, rng=0)
    for _ in range(3):
        buf.add(np.zeros(84 * 84, np.uint8), 0, 1.0, np.zeros(84 * 84, np.uint8), False, False)
    text = nest_repr(buf.sample(32))
    assert "observation=uint8[32, 7056]" in text and len(text) < 400
