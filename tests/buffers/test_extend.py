"""ReplayBuffer.extend against its slow twin, a loop of add_batch over the steps."""

from __future__ import annotations

import numpy as np
import optree
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import InvalidArgumentError, ShapeError

SPEC = {
    "observation": rc.ArraySpec((3,), np.float32),
    "action": rc.ArraySpec((), np.int64),
    "is_first": rc.ArraySpec((), bool),
    "is_last": rc.ArraySpec((), bool),
}


def block(k: int, count: int, start: int, ends: np.ndarray) -> dict:
    v = start + np.arange(k * count).reshape(k, count)
    return {
        "observation": np.repeat(v[..., None], 3, axis=2).astype(np.float32),
        "action": v.astype(np.int64),
        "is_first": np.zeros((k, count), bool),
        "is_last": ends,
    }


def make(kind: str, stack: bool, num_envs: int, max_length: int) -> rc.ReplayBuffer:
    spec, stacks = dict(SPEC), None
    if stack:
        spec["frames"] = rc.ArraySpec((2, 4), np.uint8)
        stacks = {"frames": rc.FrameStack(2, axis=0, padding="zero")}
    sampler = {"uniform": rc.Uniform(), "fifo": rc.Fifo(), "prioritized": rc.Prioritized()}[kind]
    seq = 1 if kind == "prioritized" else None
    return rc.ReplayBuffer(
        spec, num_envs * max_length, num_envs, rng=3, sampler=sampler, sequence_length=seq,
        frame_stacks=stacks,
    )  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(1, 6),
    kind=st.sampled_from(["uniform", "fifo", "prioritized"]),
    stack=st.booleans(),
    writes=st.lists(
        st.tuples(st.integers(0, 13), st.integers(0, 2**31 - 1), st.booleans()), max_size=5
    ),
)
def test_extend_equals_a_loop_of_add_batch(num_envs, max_length, kind, stack, writes):
    fast, slow = (make(kind, stack, num_envs, max_length) for _ in range(2))
    counter = 0
    for count, seed, subset in writes:
        gen = np.random.default_rng(seed)
        rows = None
        if subset:
            rows = sorted(gen.choice(num_envs, gen.integers(1, num_envs + 1), replace=False))
        k = num_envs if rows is None else len(rows)
        steps = block(k, count, counter, gen.random((k, count)) < 0.3)
        counter += k * count
        if stack:
            steps["frames"] = gen.integers(0, 255, (k, count, 2, 4), dtype=np.uint8)
            steps["frames"][:, :, 0] = 0  # zero padding: a consistent stack of 2 frames
        fast.extend(steps, rows=rows)
        for j in range(count):
            step = optree.tree_map(lambda x, j=j: x[:, j], steps)
            if stack:  # the older frame of a stack is the previous step's newest
                step["frames"] = steps["frames"][:, j]
            slow.add_batch(step, rows=rows)
    assert fast.reader.steps_per_row().tolist() == slow.reader.steps_per_row().tolist()
    assert fast.table.index.t.tolist() == slow.table.index.t.tolist()
    for row in range(num_envs):
        a, b = fast.reader.gather_row(row), slow.reader.gather_row(row)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    for n in (1, 2):
        for within in (True, False):
            x = fast.table.index.segments(n, within).enumerate()
            y = slow.table.index.segments(n, within).enumerate()
            np.testing.assert_array_equal(x, y)
    if fast.table.can_sample(1):
        s, t = fast.sample(16), slow.sample(16)
        np.testing.assert_array_equal(s.ids, t.ids)
        np.testing.assert_array_equal(s.data["action"], t.data["action"])


def test_extend_validates_the_whole_block_first():
    buf = rc.ReplayBuffer(SPEC, 40, 2, rng=0)
    good = block(2, 5, 0, np.zeros((2, 5), bool))
    bad = dict(good, observation=good["observation"][:, :4])
    with pytest.raises(ShapeError, match="observation"):
        buf.extend(bad)
    with pytest.raises(ShapeError, match="T, \\*shape"):
        buf.extend(optree.tree_map(lambda x: x[:, 0], good))
    with pytest.raises(InvalidArgumentError, match="distinct"):
        buf.extend(good, rows=[1, 1])
    assert buf.num_frames() == 0
    buf.extend(good)
    buf.extend(block(1, 30, 100, np.zeros((1, 30), bool)), rows=[1])  # wraps row 1 several times
    assert buf.reader.steps_per_row().tolist() == [5, 20]
    assert buf.reader.gather_row(1)["action"].tolist() == list(range(110, 130))


@settings(max_examples=100, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(1, 6),
    seq=st.integers(1, 3),
    kind=st.sampled_from(["prioritized", "prioritized0", "minheap"]),
    writes=st.lists(
        st.tuples(
            st.integers(0, 13),
            st.integers(0, 2**31 - 1),
            st.sampled_from(["all", "some", "clear", "end"]),
        ),
        max_size=6,
    ),
)
def test_prioritized_block_hook_equals_one_step_at_a_time(num_envs, max_length, seq, kind, writes):
    """``on_add_block`` (extend) leaves the sampler as ``on_add`` per step (add_batch) does:
    the same valid windows, tree values, counts and episode ends."""
    seq = min(seq, max_length)

    def sampler():
        if kind == "minheap":
            return rc.MinHeap(initial_priority=0.5)
        return rc.Prioritized(0.0 if kind == "prioritized0" else 0.6)

    fast, slow = (
        rc.ReplayBuffer(
            SPEC, num_envs * max_length, num_envs, sampler=sampler(), sequence_length=seq
        )
        for _ in range(2)
    )
    for count, seed, how in writes:
        gen = np.random.default_rng(seed)
        if how in ("clear", "end"):
            for buf in (fast, slow):
                buf.clear() if how == "clear" else buf.table.end_episodes(np.arange(num_envs))
            continue
        rows = None
        if how == "some":
            rows = sorted(gen.choice(num_envs, gen.integers(1, num_envs + 1), replace=False))
        k = num_envs if rows is None else len(rows)
        steps = block(k, count, 0, gen.random((k, count)) < 0.3)
        fast.extend(steps, rows=rows)
        for j in range(count):
            slow.add_batch(optree.tree_map(lambda x, j=j: x[:, j], steps), rows=rows)
        a, b = fast.reader.sampler.state_dict(), slow.reader.sampler.state_dict()
        assert a.keys() == b.keys()
        valid = b["start"] >= 0  # raw priorities (alpha 0) of invalid slots are unused
        for key in a:
            x, y = (a[key], b[key]) if key != "priority" else (a[key][valid], b[key][valid])
            np.testing.assert_array_equal(x, y, err_msg=key)
        if fast.table.can_sample(1):
            ids = slow.sample(8).ids
            assert fast.update_priorities(ids, np.arange(len(ids), dtype=float)) == 0
            assert slow.update_priorities(ids, np.arange(len(ids), dtype=float)) == 0


def test_prioritized_extend_takes_the_block_path():
    buf = rc.ReplayBuffer(SPEC, 8, 2, sampler=rc.Prioritized(), sequence_length=2)
    assert buf.table.block_writes
