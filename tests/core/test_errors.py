"""Every documented error: type, and a message naming the leaf path, expected and received."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import (
    CastError,
    DTypeError,
    InvalidArgumentError,
    NotEnoughDataError,
    RecollectError,
    ShapeError,
    SpecError,
)

SPEC = {
    "observation": {
        "camera": rc.ArraySpec((2, 3), np.uint8),
        "state": rc.ArraySpec((4,), np.float32),
    },
    "action": rc.ArraySpec((), np.int32),
    "reward": rc.ArraySpec((), np.float16),
    "is_last": rc.ArraySpec((), np.bool_),
}


def batch(num_envs: int = 2, value: int = 1) -> dict:
    return {
        "observation": {
            "camera": np.full((num_envs, 2, 3), value, np.uint8),
            "state": np.full((num_envs, 4), value, np.float32),
        },
        "action": np.full(num_envs, value, np.int32),
        "reward": np.full(num_envs, value, np.float16),
        "is_last": np.zeros(num_envs, bool),
    }


@pytest.fixture
def buf() -> rc.ReplayBuffer:
    b = rc.ReplayBuffer(SPEC, capacity=8, num_envs=2, rng=0)
    for v in range(3):
        b.add_batch(batch(value=v))
    return b


def snapshot(b: rc.ReplayBuffer) -> tuple:
    import optree

    return optree.tree_leaves(b.gather_all()), b.num_frames(), b.reader.item_ids()


def assert_unchanged(before: tuple, after: tuple) -> None:
    for x, y in zip(before[0], after[0], strict=True):
        np.testing.assert_array_equal(x, y)
    assert before[1] == after[1]
    np.testing.assert_array_equal(before[2], after[2])


def test_errors_subclass_builtin_exceptions():
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(NotEnoughDataError, RuntimeError)
    for err in (CastError, InvalidArgumentError, SpecError, NotEnoughDataError):
        assert issubclass(err, RecollectError)


def test_wrong_leaf_shape_names_path_expected_and_received(buf):
    bad = batch()
    bad["observation"]["state"] = np.zeros((2, 5), np.float32)
    with pytest.raises(ShapeError, match=r"'observation/state'.*\(2, 4\).*\(2, 5\)"):
        buf.add_batch(bad)


def test_wrong_dtype_that_cannot_be_cast_safely(buf):
    bad = batch()
    bad["observation"]["camera"] = np.zeros((2, 2, 3), np.float32)
    with pytest.raises(DTypeError, match=r"'observation/camera'.*float32.*uint8"):
        buf.add_batch(bad)
    bad = batch()
    bad["is_last"] = np.zeros(2, np.int64)
    with pytest.raises(DTypeError, match=r"'is_last'.*int64.*bool"):
        buf.add_batch(bad)


def test_safe_casts_are_accepted(buf):
    ok = batch()
    ok["action"] = np.array([1, 2], np.int64)  # in range: same_kind, nothing lost
    ok["reward"] = [0.5, 1.0]  # python floats -> float64 -> float16 exactly
    ok["observation"]["camera"] = np.ones((2, 2, 3), np.uint16)
    buf.add_batch(ok)
    last = buf.gather_all()
    assert last["action"].dtype == np.int32 and last["action"][1, -1] == 2
    assert last["reward"][0, -1] == np.float16(0.5)


def test_missing_leaf_is_named(buf):
    bad = batch()
    del bad["observation"]["state"]
    with pytest.raises(SpecError, match=r"missing leaves \['observation/state'\]"):
        buf.add_batch(bad)


def test_extra_leaf_is_named(buf):
    bad = batch()
    bad["discount"] = np.ones(2, np.float32)
    with pytest.raises(SpecError, match=r"extra leaves \['discount'\]"):
        buf.add_batch(bad)


def test_wrong_leading_dim_in_add_batch(buf):
    with pytest.raises(ShapeError, match=r"'action'.*expected shape \(2,\), got \(3,\)"):
        buf.add_batch(batch(num_envs=3))


def test_add_on_multi_env_buffer(buf):
    with pytest.raises(InvalidArgumentError, match=r"num_envs == 1.*num_envs=2.*add_batch"):
        buf.add(batch(1))


def test_add_single_step_shape_error_names_leaf():
    b = rc.ReplayBuffer(SPEC, capacity=4)
    step = batch(1)  # has the env dim that add() must not get
    with pytest.raises(ShapeError, match=r"add leaf 'action': expected shape \(\), got \(1,\)"):
        b.add(step)


def test_sampling_from_empty_buffer():
    b = rc.ReplayBuffer(SPEC, capacity=8, num_envs=2)
    with pytest.raises(NotEnoughDataError, match="empty buffer"):
        b.sample(4)
    b.add_batch(batch())
    b.clear()
    with pytest.raises(NotEnoughDataError, match="empty buffer"):
        b.sample(4, num_steps=1)


def test_num_steps_longer_than_any_stored_window(buf):
    with pytest.raises(NotEnoughDataError, match=r"num_steps=4.*3 steps"):
        buf.sample(2, num_steps=4)
    with pytest.raises(InvalidArgumentError, match=r"num_steps=5, max_length=4"):
        buf.sample(2, num_steps=5)


def test_num_steps_longer_than_any_stored_episode():
    b = rc.ReplayBuffer(SPEC, capacity=8, num_envs=2)
    for _ in range(4):
        step = batch()
        step["is_last"][:] = True  # every episode has one step
        b.add_batch(step)
    with pytest.raises(NotEnoughDataError, match=r"num_steps=2.*longest stored episode part has 1"):
        b.sample(1, num_steps=2)
    assert b.sample(1, num_steps=2, within_episode=False).data["action"].shape == (1, 2)


@pytest.mark.parametrize("batch_size", [0, -3, 1.5, True, None])
def test_batch_size_below_one(buf, batch_size):
    with pytest.raises(InvalidArgumentError, match=rf"batch_size.*got batch_size={batch_size}"):
        buf.sample(batch_size)


def test_num_steps_below_one(buf):
    with pytest.raises(InvalidArgumentError, match=r"num_steps.*got num_steps=0"):
        buf.sample(2, num_steps=0)


@pytest.mark.parametrize(("capacity", "num_envs"), [(10, 4), (3, 4), (0, 1)])
def test_capacity_not_a_multiple_of_num_envs(capacity, num_envs):
    with pytest.raises(InvalidArgumentError, match=rf"capacity.*got capacity={capacity}"):
        rc.ReplayBuffer(SPEC, capacity=capacity, num_envs=num_envs)
    if capacity:
        with pytest.raises(InvalidArgumentError, match=rf"capacity={capacity}, num_envs"):
            rc.TransitionBuffer(capacity=capacity, num_envs=num_envs)


def test_nan_into_integer_leaf(buf):
    bad = batch()
    bad["action"] = np.array([1.0, np.nan])
    with pytest.raises(DTypeError, match=r"'action'.*float64.*int32"):
        buf.add_batch(bad)


def test_out_of_range_cast(buf):
    bad = batch()
    # int64 -> uint8 is not a same_kind cast at all (signed into unsigned): refused by dtype.
    bad["observation"]["camera"] = np.full((2, 2, 3), 300, np.int64)
    with pytest.raises(DTypeError, match=r"'observation/camera'.*int64.*uint8"):
        buf.add_batch(bad)
    # uint16 -> uint8 is same_kind, so the values decide.
    bad["observation"]["camera"] = np.full((2, 2, 3), 300, np.uint16)
    with pytest.raises(CastError, match=r"'observation/camera'.*\[300, 300\].*uint8"):
        buf.add_batch(bad)
    bad = batch()
    bad["action"] = np.array([-(2**31) - 1, 0], np.int64)
    with pytest.raises(CastError, match=r"'action'.*\[-2147483649, 0\].*int32"):
        buf.add_batch(bad)


def test_float_overflow_cast(buf):
    bad = batch()
    bad["reward"] = np.array([1.0, 1e6])  # finite float64, inf as float16
    with pytest.raises(CastError, match=r"'reward'.*overflow float16"):
        buf.add_batch(bad)


def test_inexact_int_to_float_cast():
    b = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, capacity=2)
    with pytest.raises(CastError, match=r"'x'.*not exactly representable as float32"):
        b.add({"x": np.int64(2**24 + 1)})


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda s: s["observation"].__setitem__("state", np.zeros((2, 5), np.float32)),
        lambda s: s.__setitem__("action", np.array([1, 2**40])),
        lambda s: s.__setitem__("reward", np.array([1, 2], np.complex64)),
        lambda s: s.pop("is_last"),
        lambda s: s.__setitem__("is_last", np.zeros(3, bool)),
    ],
)
def test_rejected_add_batch_changes_nothing(buf, corrupt):
    before = snapshot(buf)
    t = int(buf.table.index.t[0])
    bad = batch(value=9)
    bad["is_last"][:] = True
    corrupt(bad)
    with pytest.raises(RecollectError):
        buf.add_batch(bad)
    assert_unchanged(before, snapshot(buf))
    assert (buf.table.index.t == t).all()
    buf.add_batch(batch(value=5))  # the next good batch gets the next id
    assert buf.reader.item_ids()[:, -1].tolist() == rc.ids.encode([0, 1], t).tolist()


def test_within_episode_true_needs_is_last():
    b = rc.ReplayBuffer({"x": rc.ArraySpec((), np.int32)}, capacity=4)
    b.add({"x": 1})
    with pytest.raises(InvalidArgumentError, match=r"within_episode=True.*'is_last'.*\['x'\]"):
        b.sample(1, within_episode=True)


def test_is_last_leaf_must_be_bool_scalar():
    with pytest.raises(SpecError, match=r"'is_last'.*bool scalar.*shape \(2,\)"):
        rc.ReplayBuffer({"is_last": rc.ArraySpec((2,), np.bool_)}, capacity=4)


def test_bad_specs():
    with pytest.raises(SpecError, match="shape must not be negative"):
        rc.ArraySpec((-1,), np.float32)
    with pytest.raises(SpecError, match=r"not a numpy dtype|fixed-size"):
        rc.ArraySpec((1,), "not-a-dtype")
    with pytest.raises(SpecError, match="fixed-size"):
        rc.ArraySpec((1,), object)
    with pytest.raises(SpecError, match="no leaves"):
        rc.ReplayBuffer({}, capacity=4)
    with pytest.raises(SpecError, match=r"leaf 'obs'.*needs \.shape and \.dtype"):
        rc.ReplayBuffer({"obs": 3}, capacity=4)
