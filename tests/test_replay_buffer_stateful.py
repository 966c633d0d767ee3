"""Hypothesis state machines: ReplayBuffer and WindowIndex against tests/reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import recollect as rc
from recollect.errors import InvalidArgumentError, NotEnoughDataError, ShapeError
from recollect.specs import FlatSpec
from recollect.windows import WindowIndex
from reference import ReferenceBuffer, ReferenceWindows, by_id

EPISODIC_SPEC = {
    "observation": {
        "camera": rc.ArraySpec((2, 2), np.uint8),
        "state": rc.ArraySpec((3,), np.float32),
    },
    "action": rc.ArraySpec((), np.int32),
    "reward": rc.ArraySpec((), np.float16),
    "is_first": rc.ArraySpec((), np.bool_),
    "is_last": rc.ArraySpec((), np.bool_),
}
# No is_last leaf: windows respect only the stored range (TF-Agents behaviour).
PLAIN_SPEC = (rc.ArraySpec((2,), np.float32), [rc.ArraySpec((), np.int64)])


def make_steps(episodic: bool, first_value: int, is_last: list[bool]) -> object:
    """One step per env row; every value derives from a unique counter."""
    v = first_value + np.arange(len(is_last))
    if not episodic:
        return (v[:, None] + np.array([0.0, 0.5], np.float32), [v.astype(np.int64)])
    return {
        "observation": {
            "camera": ((v[:, None, None] + np.arange(4).reshape(2, 2)) % 256).astype(np.uint8),
            "state": (v[:, None] + np.array([0.0, 0.25, 0.5])).astype(np.float32),
        },
        "action": v.astype(np.int32),
        "reward": (v % 2048).astype(np.float16),
        "is_first": np.zeros(len(is_last), bool),
        "is_last": np.array(is_last, bool),
    }


STATE_SETTINGS = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class ReplayBufferMachine(RuleBasedStateMachine):
    """Random add/add_batch/sample/clear sequences on a small buffer and its reference."""

    @initialize(
        num_envs=st.integers(1, 4),
        max_length=st.integers(1, 6),
        episodic=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def setup(self, num_envs: int, max_length: int, episodic: bool, seed: int) -> None:
        spec = EPISODIC_SPEC if episodic else PLAIN_SPEC
        self.episodic = episodic
        self.flat = FlatSpec(spec)
        self.buf = rc.ReplayBuffer(spec, num_envs * max_length, num_envs, rng=seed)
        is_last_index = self.flat.index("is_last") if episodic else None
        self.ref = ReferenceBuffer(num_envs, max_length, is_last_index)
        self.counter = 0

    def _add(self, is_last: list[bool], single: bool) -> None:
        steps = make_steps(self.episodic, self.counter, is_last)
        self.counter += len(is_last)
        if single:
            self.buf.add(_first(steps))
        else:
            self.buf.add_batch(steps)
        self.ref.add_batch(self.flat.treedef.flatten_up_to(steps))

    @rule(data=st.data(), single=st.booleans())
    def add_batch(self, data: st.DataObject, single: bool) -> None:
        n = self.ref.num_envs
        is_last = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        self._add(is_last, single and n == 1)

    @rule(data=st.data(), count=st.integers(1, 10))
    def add_many(self, data: st.DataObject, count: int) -> None:
        n = self.ref.num_envs
        flags = st.lists(st.sampled_from([False, False, False, True]), min_size=n, max_size=n)
        for _ in range(count):
            self._add(data.draw(flags), single=False)

    @rule(data=st.data())
    def rejected_add_batch(self, data: st.DataObject) -> None:
        """A bad batch raises and leaves everything unchanged (checked by the invariants)."""
        n = self.ref.num_envs
        steps = make_steps(self.episodic, self.counter, [False] * n)
        leaves, treedef = self.flat.leaves, self.flat.treedef
        values = treedef.flatten_up_to(steps)
        bad = data.draw(st.integers(0, len(leaves) - 1))
        values[bad] = np.zeros((n + 1, *leaves[bad].shape), leaves[bad].dtype)
        with pytest.raises(ShapeError, match=self.flat.paths[bad]):
            self.buf.add_batch(treedef.unflatten(values))

    @rule()
    def clear(self) -> None:
        self.buf.clear()
        self.ref.clear()

    @rule(
        batch_size=st.integers(1, 8),
        num_steps=st.one_of(st.none(), st.integers(1, 5)),
        within=st.sampled_from([None, True, False]),
    )
    def sample(self, batch_size: int, num_steps: int | None, within: bool | None) -> None:
        n = num_steps or 1
        if n > self.ref.max_length:
            with pytest.raises(InvalidArgumentError, match="num_steps"):
                self.buf.sample(batch_size, num_steps, within_episode=within)
            return
        if within is True and not self.episodic:
            with pytest.raises(InvalidArgumentError, match="is_last"):
                self.buf.sample(batch_size, num_steps, within_episode=within)
            return
        within_episode = self.episodic if within is None else within
        valid = self.ref.windows(n, within_episode)
        rows, times = self.buf._index.segments(n, within_episode).enumerate()
        assert list(zip(rows.tolist(), times.tolist(), strict=True)) == valid
        if not valid:
            with pytest.raises(NotEnoughDataError, match=r"num_steps|empty"):
                self.buf.sample(batch_size, num_steps, within_episode=within)
            return
        s = self.buf.sample(batch_size, num_steps, within_episode=within)
        self._check_sample(s, valid, num_steps, batch_size)

    def _check_sample(self, s: rc.Sample, valid: list, num_steps: int | None, batch: int) -> None:
        assert s.ids.dtype == np.int64 and s.ids.shape == (batch,)
        assert s.probabilities.dtype == np.float64
        np.testing.assert_array_equal(s.probabilities, np.full(batch, 1.0 / len(valid)))
        leaves = self.flat.treedef.flatten_up_to(s.data)
        lead = (batch,) if num_steps is None else (batch, num_steps)
        for leaf, spec in zip(leaves, self.flat.leaves, strict=True):
            assert leaf.shape == lead + spec.shape and leaf.dtype == spec.dtype
        valid_set = set(valid)
        for b, (row, time) in enumerate(by_id(s.ids, self.ref.num_envs)):
            assert (row, time) in valid_set
            expected = self.ref.window_leaves(row, time, num_steps)
            for leaf, want in zip(leaves, expected, strict=True):
                np.testing.assert_array_equal(leaf[b], want)

    @invariant()
    def stored_steps_match(self) -> None:
        if not hasattr(self, "buf"):
            return
        assert self.buf.num_frames() == len(self.buf) == self.ref.num_frames()
        np.testing.assert_array_equal(self.buf.item_ids(), self.ref.item_ids())
        got = self.flat.treedef.flatten_up_to(self.buf.gather_all())
        want = self.ref.gather_all(len(got))
        for leaf, spec in zip(got, self.flat.leaves, strict=True):
            assert leaf.shape[:2] == (self.ref.num_envs, self.ref.num_frames() // self.ref.num_envs)
            assert leaf.dtype == spec.dtype
        if want is not None:
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)

    @precondition(lambda self: hasattr(self, "buf"))
    @invariant()
    def ids_never_reused(self) -> None:
        ids = self.buf.item_ids()
        if ids.size:
            assert ids.min() >= self.buf._index.t_clear * self.ref.num_envs
            assert ids.max() < self.ref.t * self.ref.num_envs


def _first(steps: object) -> object:
    import optree

    return optree.tree_map(lambda x: x[0], steps)


ReplayBufferMachine.TestCase.settings = STATE_SETTINGS
TestReplayBufferMachine = ReplayBufferMachine.TestCase


# -- WindowIndex properties ----------------------------------------------------
ops = st.lists(
    st.one_of(
        st.just("clear"),
        st.lists(st.sampled_from([False, False, True]), min_size=4, max_size=4),
    ),
    max_size=40,
)


def _drive(
    num_envs: int, max_length: int, operations: list
) -> tuple[WindowIndex, ReferenceWindows]:
    index, ref = WindowIndex(num_envs, max_length), ReferenceWindows(num_envs, max_length)
    for op in operations:
        if op == "clear":
            index.clear()
            ref.clear()
        else:
            flags = op[:num_envs]
            index.advance(np.array(flags, bool))
            ref.advance(flags)
    return index, ref


def _windows(index: WindowIndex, n: int, within: bool) -> list[tuple[int, int]]:
    rows, times = index.segments(n, within).enumerate()
    return list(zip(rows.tolist(), times.tolist(), strict=True))


@settings(max_examples=150, deadline=None)
@given(num_envs=st.integers(1, 4), max_length=st.integers(1, 7), operations=ops)
def test_window_index_segments_equal_brute_force(num_envs, max_length, operations):
    index, ref = _drive(num_envs, max_length, operations)
    assert (index.lo, index.hi) == (ref.lo, ref.t)
    for n in range(1, max_length + 2):
        for within in (True, False):
            seg = index.segments(n, within)
            assert (seg.counts > 0).all()
            assert _windows(index, n, within) == ref.windows(n, within)
            assert index.count(n, within) == len(ref.windows(n, within))


@settings(max_examples=150, deadline=None)
@given(num_envs=st.integers(1, 4), max_length=st.integers(1, 7), operations=ops)
def test_window_index_rebuild_equals_incremental_log(num_envs, max_length, operations):
    index, ref = _drive(num_envs, max_length, operations)
    rebuilt = WindowIndex(num_envs, max_length)
    rebuilt.t, rebuilt.t_clear = index.t, index.t_clear
    stored = np.array([list(f) for f in ref.flags], dtype=bool).reshape(num_envs, -1)
    rebuilt.rebuild(stored)
    for n in range(1, max_length + 1):
        for within in (True, False):
            assert _windows(rebuilt, n, within) == _windows(index, n, within)
    # Both keep working identically after more writes.
    for flags in ([True] * num_envs, [False] * num_envs, [False] * num_envs):
        index.advance(np.array(flags))
        rebuilt.advance(np.array(flags))
        for n in range(1, max_length + 1):
            assert _windows(rebuilt, n, True) == _windows(index, n, True)
