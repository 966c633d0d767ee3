"""ReplayBuffer behaviour: the public API of issue 2, windows, ids, determinism, threads."""

from __future__ import annotations

import threading

import numpy as np
import optree
import pytest

import recollect as rc
from recollect.errors import NotEnoughDataError

SPEC = {
    "observation": rc.ArraySpec((4,), np.float32),
    "action": rc.ArraySpec((), np.int64),
    "reward": rc.ArraySpec((), np.float32),
    "small": rc.ArraySpec((2,), np.uint8),
    "half": rc.ArraySpec((), np.float16),
    "is_first": rc.ArraySpec((), np.bool_),
    "is_last": rc.ArraySpec((), np.bool_),
}


def steps(t: int, num_envs: int, is_last=None) -> dict:
    """Step ``t`` of every row; ``action`` holds the step's id."""
    ids = rc.ids.encode(np.arange(num_envs), t)
    small = t * num_envs + np.arange(num_envs)  # exact in float32
    return {
        "observation": np.repeat(small[:, None], 4, axis=1).astype(np.float32),
        "action": ids.astype(np.int64),
        "reward": np.full(num_envs, t, np.float32),
        "small": np.stack([ids % 256, (ids >> 40) % 7], axis=1).astype(np.uint8),
        "half": (ids % 1000).astype(np.float16),
        "is_first": np.zeros(num_envs, bool),
        "is_last": np.zeros(num_envs, bool) if is_last is None else np.asarray(is_last),
    }


def filled(num_envs=4, capacity=40, count=7, rng=0) -> rc.ReplayBuffer:
    buf = rc.ReplayBuffer(SPEC, capacity=capacity, num_envs=num_envs, rng=rng)
    for t in range(count):
        buf.add_batch(steps(t, num_envs))
    return buf


def test_issue_example_shapes_and_metadata():
    buf = filled()
    assert (buf.capacity, buf.num_envs, len(buf), buf.num_frames()) == (40, 4, 28, 28)
    assert buf.data_spec["small"] == rc.ArraySpec((2,), np.uint8)
    s = buf.sample(batch_size=32, num_steps=2)
    assert s.data["observation"].shape == (32, 2, 4) and s.data["half"].dtype == np.float16
    assert s.ids.dtype == np.int64 and s.ids.shape == (32,)
    assert s.probabilities.dtype == np.float64 and s.weights is None
    np.testing.assert_array_equal(s.data["action"][:, 0], s.ids)  # id = ids.encode(row, t)
    np.testing.assert_array_equal(s.data["action"][:, 1], s.ids + 1)  # same row, next step
    single = buf.sample(8)
    assert single.data["observation"].shape == (8, 4) and single.data["action"].shape == (8,)
    np.testing.assert_array_equal(single.data["action"], single.ids)
    np.testing.assert_array_equal(single.probabilities, 1 / 28)


def test_get_next_is_not_on_the_framework_free_buffer():
    assert not hasattr(rc.ReplayBuffer, "get_next")  # recollect.tf_agents.reads.get_next


def test_single_env_add_and_gather_all_oldest_first():
    buf = rc.ReplayBuffer(SPEC, capacity=3, rng=0)
    for t in range(5):
        buf.add(optree.tree_map(lambda x: x[0], steps(t, 1)))
    all_steps = buf.gather_all()
    assert all_steps["action"].tolist() == [[2, 3, 4]]
    assert all_steps["small"].shape == (1, 3, 2)
    assert buf.reader.item_ids().tolist() == [[2, 3, 4]]


def test_windows_never_span_the_write_position_after_wraparound():
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.int32)}, capacity=4, rng=0)
    for t in range(6):
        buf.add({"x": t})
    s = buf.sample(500, num_steps=2)
    assert set(s.ids.tolist()) == {2, 3, 4}  # slots hold 4 5 2 3: never (5, 2)
    np.testing.assert_array_equal(s.data["x"][:, 1] - s.data["x"][:, 0], 1)
    assert set(buf.sample(100, num_steps=4).ids.tolist()) == {2}


def test_episode_aware_windows_may_end_but_never_cross_is_last():
    buf = rc.ReplayBuffer(SPEC, capacity=20, num_envs=2, rng=0)
    for t in range(8):
        buf.add_batch(steps(t, 2, is_last=[t % 3 == 2, False]))
    s = buf.sample(2000, num_steps=3)
    assert not s.data["is_last"][:, :2].any()
    _, rows, times = rc.ids.decode(s.ids)
    assert set(times[rows == 0].tolist()) == {0, 3}  # episodes [0..2], [3..5], [6..7]
    assert set(times[rows == 1].tolist()) == set(range(6))
    np.testing.assert_array_equal(s.probabilities, 1 / 8)
    crossing = buf.sample(2000, num_steps=3, within_episode=False)
    assert set(rc.ids.decode(crossing.ids)[2].tolist()) == set(range(6))
    np.testing.assert_array_equal(crossing.probabilities, 1 / 12)


def test_no_is_last_leaf_means_tf_agents_behaviour():
    spec = {k: v for k, v in SPEC.items() if k != "is_last"}
    buf = rc.ReplayBuffer(spec, capacity=8, num_envs=2, rng=0)
    for t in range(3):
        batch = steps(t, 2)
        del batch["is_last"]
        buf.add_batch(batch)
    assert not buf.writer.episode_aware
    assert set(buf.sample(300, num_steps=3).ids.tolist()) == set(rc.ids.encode([0, 1], 0).tolist())


def test_ids_are_never_reused_across_clear():
    buf = filled(count=3)
    old = set(buf.reader.item_ids().ravel().tolist())
    buf.clear()
    assert len(buf) == 0 and buf.gather_all()["action"].shape == (4, 0)
    with pytest.raises(NotEnoughDataError):
        buf.sample(1)
    buf.add_batch(steps(3, 4))
    new = buf.sample(64).ids
    assert set(new.tolist()) == set(rc.ids.encode(np.arange(4), 3).tolist())
    assert not old & set(new.tolist())


def test_seeded_buffers_sample_the_same_sequence():
    a, b = filled(rng=123), filled(rng=123)
    c = filled(rng=np.random.default_rng(123))
    for _ in range(3):
        ids = a.sample(16, num_steps=2).ids
        np.testing.assert_array_equal(ids, b.sample(16, num_steps=2).ids)
        np.testing.assert_array_equal(ids, c.sample(16, num_steps=2).ids)
    assert not np.array_equal(filled(rng=1).sample(64).ids, filled(rng=2).sample(64).ids)


def test_sample_is_a_copy():
    buf = filled()
    s = buf.sample(4, num_steps=2)
    s.data["observation"][:] = -1
    assert (buf.gather_all()["observation"] >= 0).all()


def test_casts_on_add_keep_values():
    buf = rc.ReplayBuffer(SPEC, capacity=2, rng=0)
    step = optree.tree_map(lambda x: x[0], steps(1, 1))
    step["observation"] = [1, 2, 3, 4]  # python ints -> float32
    step["action"] = np.int8(-3)
    step["reward"] = 0.25
    step["half"] = np.float32(0.5)
    step["is_last"] = True
    buf.add(step)
    got = optree.tree_map(lambda x: x[0, 0], buf.gather_all())
    assert got["observation"].tolist() == [1, 2, 3, 4] and got["action"] == -3
    assert got["reward"] == np.float32(0.25) and got["half"] == np.float16(0.5) and got["is_last"]


def test_one_writer_and_many_readers_in_threads():
    buf = rc.ReplayBuffer(SPEC, capacity=64, num_envs=4, rng=0)
    buf.add_batch(steps(0, 4))
    buf.add_batch(steps(1, 4))
    errors: list[BaseException] = []
    done = threading.Event()

    def reader():
        try:
            while not done.is_set():
                s = buf.sample(32, num_steps=2)
                np.testing.assert_array_equal(s.data["action"][:, 0], s.ids)
                np.testing.assert_array_equal(s.data["action"][:, 1], s.ids + 1)
                _, rows, times = rc.ids.decode(s.data["action"])
                small = (times * 4 + rows).astype(np.float32)
                np.testing.assert_array_equal(s.data["observation"][:, :, 3], small)
        except BaseException as err:
            errors.append(err)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for r in readers:
        r.start()
    for t in range(2, 1500):
        buf.add_batch(steps(t, 4))
    done.set()
    for r in readers:
        r.join()
    assert not errors, errors[0]


def test_repr_names_the_essentials():
    assert "capacity=40, num_envs=4, stored=28" in repr(filled())


def image_buffer(num_envs=4, max_length=64, count=100) -> rc.ReplayBuffer:
    """Image leaves large enough that sampling takes the multi-threaded gather path."""
    spec = {"pixels": rc.ArraySpec((32, 32, 3), np.uint8), "id": rc.ArraySpec((), np.int64)}
    buf = rc.ReplayBuffer(spec, capacity=num_envs * max_length, num_envs=num_envs, rng=0)
    for t in range(count):
        ids = rc.ids.encode(np.arange(num_envs), t)
        pixels = np.broadcast_to((ids % 251)[:, None, None, None], (num_envs, 32, 32, 3))
        buf.add_batch({"pixels": pixels.astype(np.uint8), "id": ids})
    return buf


def test_large_gathers_are_exact_and_never_alias_earlier_samples():
    buf = image_buffer()
    first = buf.sample(256, num_steps=3)  # 2.4 MB of pixels: split over threads
    kept = first.data["pixels"].copy()
    for _ in range(5):
        s = buf.sample(256, num_steps=3)
        expected_ids = s.ids[:, None] + np.arange(3)
        np.testing.assert_array_equal(s.data["id"], expected_ids)
        np.testing.assert_array_equal(
            s.data["pixels"],
            np.broadcast_to((expected_ids % 251)[..., None, None, None], kept.shape),
        )
    np.testing.assert_array_equal(first.data["pixels"], kept)  # still intact
    pixels = first.data["pixels"]
    del first
    np.testing.assert_array_equal(pixels, kept)  # a leaf alone keeps its memory alive


def test_concurrent_large_gathers_in_threads():
    buf = image_buffer(count=64)
    errors: list[BaseException] = []

    def reader():
        try:
            for _ in range(15):
                s = buf.sample(128, num_steps=2)
                want = (s.data["id"] % 251).astype(np.uint8)
                np.testing.assert_array_equal(s.data["pixels"][:, :, 5, 7, 1], want)
                np.testing.assert_array_equal(s.data["id"][:, 1], s.data["id"][:, 0] + 1)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def test_added_arrays_are_copied_not_referenced():
    buf = rc.ReplayBuffer(SPEC, capacity=8, num_envs=2, rng=0)
    batch = steps(0, 2)
    buf.add_batch(batch)
    for leaf in optree.tree_leaves(batch):
        leaf[...] = 1  # an env reusing its output arrays must not change stored steps
    np.testing.assert_array_equal(buf.gather_all()["action"], rc.ids.encode([[0], [1]], 0))
    assert not buf.gather_all()["is_last"].any()
