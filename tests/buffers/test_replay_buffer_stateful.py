"""Hypothesis state machines: ReplayBuffer and WindowIndex against tests/reference.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import recollect as rc
from recollect.errors import InvalidArgumentError, NotEnoughDataError, ShapeError
from recollect.samplers.windows import WindowIndex
from recollect.specs import FlatSpec
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
    # 200 machines in CI; 80 keep the default run short (about 4 s instead of 10)
    max_examples=200 if os.environ.get("CI", "").lower() == "true" else 80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


SAMPLERS = ("uniform", "fifo", "lifo", "prioritized")


class ReplayBufferMachine(RuleBasedStateMachine):
    """Random add/add_batch(rows=...)/sample/clear/update sequences against the reference.

    Rows are written at different paces (``add_batch(..., rows=...)``) over
    wraparound, episode ends and clears; the sampler is uniform, FIFO, LIFO or
    prioritized, and episodic buffers may hold a frame-stacked leaf whose
    stacks the frame store rebuilds.
    """

    @initialize(
        num_envs=st.integers(1, 4),
        max_length=st.integers(1, 6),
        episodic=st.booleans(),
        sampler=st.sampled_from(SAMPLERS),
        stack=st.sampled_from([0, 0, 2, 3]),
        seq=st.integers(1, 2),
        track=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def setup(
        self,
        num_envs: int,
        max_length: int,
        episodic: bool,
        sampler: str,
        stack: int,
        seq: int,
        track: bool,
        seed: int,
    ) -> None:
        spec = dict(EPISODIC_SPEC) if episodic else PLAIN_SPEC
        self.stack = stack if episodic else 0
        stacks = None
        if self.stack:
            spec["frames"] = rc.ArraySpec((self.stack, 3), np.uint8)
            stacks = {"frames": rc.FrameStack(self.stack, axis=0, padding="reset")}
        self.episodic = episodic
        self.kind = sampler
        self.seq = min(seq, max_length) if sampler == "prioritized" else None
        samplers = {"uniform": rc.Uniform, "fifo": rc.Fifo, "lifo": rc.Lifo}
        chosen = rc.Prioritized(0.7) if sampler == "prioritized" else samplers[sampler]()
        self.flat = FlatSpec(spec)
        self.buf = rc.ReplayBuffer(
            spec,
            num_envs * max_length,
            num_envs,
            rng=seed,
            sampler=chosen,
            sequence_length=self.seq,
            frame_stacks=stacks,
            track_times_sampled=track,
        )
        self.track = track
        self.times_sampled: dict[tuple[int, int], int] = {}  # (row, time) never repeats
        is_last_index = self.flat.index("is_last") if episodic else None
        self.ref = ReferenceBuffer(num_envs, max_length, is_last_index)
        self.counter = 0
        # frame history per row, as an env with FrameStackObservation("reset") keeps it
        self.history: list[list[int]] = [[] for _ in range(num_envs)]
        self.ended = [True] * num_envs
        self.priorities: dict[tuple[int, int], float] = {}
        self.max_priority = 1.0

    def _steps(self, is_last: list[bool], rows: list[int]) -> object:
        steps = make_steps(self.episodic, self.counter, is_last)
        self.counter += len(is_last)
        if self.stack:
            stacks = []
            for k, row in enumerate(rows):
                frame = (self.counter * 7 + k) % 250 + 1
                self.history[row] = [frame] if self.ended[row] else [*self.history[row], frame]
                self.ended[row] = bool(is_last[k])
                last = self.history[row][-self.stack :]
                padded = [last[0]] * (self.stack - len(last)) + last
                stacks.append(np.repeat(np.array(padded, np.uint8)[:, None], 3, axis=1))
            steps["frames"] = np.stack(stacks)
        return steps

    def _add(self, is_last: list[bool], rows: list[int] | None, single: bool) -> None:
        written = list(range(self.ref.num_envs)) if rows is None else rows
        steps = self._steps(is_last, written)
        if single:
            self.buf.add(_first(steps))
        elif rows is None:
            self.buf.add_batch(steps)
        else:
            self.buf.add_batch(steps, rows=rows)
        self.ref.add_batch(self.flat.treedef.flatten_up_to(steps), written)
        self._track_priorities()

    def _track_priorities(self) -> None:
        """New valid windows get the running max priority; gone ones are forgotten."""
        if self.kind != "prioritized":
            return
        valid = set(self.ref.windows(self.seq, self.episodic))
        self.priorities = {w: p for w, p in self.priorities.items() if w in valid}
        for w in valid - set(self.priorities):
            self.priorities[w] = self.max_priority

    @rule(data=st.data(), single=st.booleans())
    def add_batch(self, data: st.DataObject, single: bool) -> None:
        n = self.ref.num_envs
        is_last = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        self._add(is_last, None, single and n == 1)

    @rule(data=st.data(), count=st.integers(1, 10))
    def add_many(self, data: st.DataObject, count: int) -> None:
        n = self.ref.num_envs
        flags = st.lists(st.sampled_from([False, False, False, True]), min_size=n, max_size=n)
        for _ in range(count):
            self._add(data.draw(flags), None, single=False)

    @rule(data=st.data(), count=st.integers(1, 6))
    def add_rows(self, data: st.DataObject, count: int) -> None:
        """Some rows only, in any order: each row advances at its own pace."""
        n = self.ref.num_envs
        for _ in range(count):
            rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
            flags = st.sampled_from([False, False, True])
            is_last = data.draw(st.lists(flags, min_size=len(rows), max_size=len(rows)))
            self._add(is_last, rows, single=False)

    @rule(data=st.data())
    def rejected_add_batch(self, data: st.DataObject) -> None:
        """A bad batch raises and leaves everything unchanged (checked by the invariants)."""
        n = self.ref.num_envs
        steps = make_steps(self.episodic, self.counter, [False] * n)
        if self.stack:
            steps["frames"] = np.zeros((n, self.stack, 3), np.uint8)
        leaves, treedef = self.flat.leaves, self.flat.treedef
        values = treedef.flatten_up_to(steps)
        bad = data.draw(st.integers(0, len(leaves) - 1))
        values[bad] = np.zeros((n + 1, *leaves[bad].shape), leaves[bad].dtype)
        with pytest.raises(ShapeError, match=self.flat.paths[bad]):
            self.buf.add_batch(treedef.unflatten(values))
        with pytest.raises(InvalidArgumentError, match="rows"):
            self.buf.add_batch(steps, rows=[0, 0] if n > 1 else [n])

    @rule()
    def clear(self) -> None:
        self.buf.clear()
        self.ref.clear()
        self.priorities = {}

    @precondition(lambda self: self.kind == "prioritized")
    @rule(data=st.data())
    def update_priorities(self, data: st.DataObject) -> None:
        valid = self.ref.windows(self.seq, self.episodic)
        if not valid:
            return
        picks = data.draw(st.lists(st.sampled_from(valid), min_size=1, max_size=4))
        values = data.draw(st.lists(st.floats(0, 10), min_size=len(picks), max_size=len(picks)))
        ids = [self.ref.item_id(row, time) for row, time in picks]
        assert self.buf.update_priorities([*ids, -1], [*values, 1.0]) == 1
        for pick, value in zip(picks, values, strict=True):
            self.priorities[pick] = value
        self.max_priority = max(self.max_priority, *values)

    @rule(
        batch_size=st.integers(1, 8),
        num_steps=st.one_of(st.none(), st.integers(1, 5)),
        within=st.sampled_from([None, True, False]),
    )
    def sample(self, batch_size: int, num_steps: int | None, within: bool | None) -> None:
        if self.kind == "prioritized":
            num_steps, within = (None if num_steps is None else self.seq), None
        n = num_steps or self.seq or 1
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
        rows, times = self.buf.table.index.segments(n, within_episode).enumerate()
        assert list(zip(rows.tolist(), times.tolist(), strict=True)) == valid
        if not valid:
            with pytest.raises(NotEnoughDataError, match=r"num_steps|empty"):
                self.buf.sample(batch_size, num_steps, within_episode=within)
            return
        if self.kind == "prioritized" and not self._positive(valid):
            with pytest.raises(NotEnoughDataError, match="priority 0"):
                self.buf.sample(batch_size, num_steps)
            return
        s = self.buf.sample(batch_size, num_steps, within_episode=within)
        self._check_sample(s, valid, num_steps, batch_size)

    def _positive(self, valid: list) -> bool:
        eps = self.buf.reader.sampler.epsilon
        return sum((self.priorities[w] + eps) ** 0.7 for w in valid) > 0

    def _check_sample(self, s: rc.Sample, valid: list, num_steps: int | None, batch: int) -> None:
        assert s.ids.dtype == np.int64 and s.ids.shape == (batch,)
        assert s.probabilities.dtype == np.float64
        drawn = by_id(s.ids, self.ref.num_envs)
        if self.kind == "uniform":
            np.testing.assert_array_equal(s.probabilities, np.full(batch, 1.0 / len(valid)))
        elif self.kind in ("fifo", "lifo"):
            order = valid if self.kind == "fifo" else valid[::-1]
            assert drawn == [order[0]] * batch  # Reverb: the first window, once per item
        else:
            eps = self.buf.reader.sampler.epsilon
            values = {w: (self.priorities[w] + eps) ** 0.7 for w in valid}
            total = sum(values.values())
            want = [values[w] / total for w in drawn]
            np.testing.assert_allclose(s.probabilities, want, rtol=1e-9)
            want_p = [self.priorities[w] for w in drawn]
            np.testing.assert_allclose(s.priorities, want_p, rtol=1e-9, atol=1e-9)
            w = (
                len(valid) * np.array(want)
            ) ** -self.buf.reader.sampler.importance_sampling_exponent
            p_min = min(v for v in values.values() if v > 0) / total  # buffer-wide (cpprb)
            beta = self.buf.reader.sampler.importance_sampling_exponent
            np.testing.assert_allclose(s.weights, w / (len(valid) * p_min) ** -beta, rtol=1e-9)
        assert s.table_size == len(valid)
        if self.track:
            want_counts = []
            for w in drawn:
                self.times_sampled[w] = self.times_sampled.get(w, 0) + 1
                want_counts.append(self.times_sampled[w])
            assert s.times_sampled.tolist() == want_counts
        else:
            assert s.times_sampled is None
        leaves = self.flat.treedef.flatten_up_to(s.data)
        time_axis = num_steps is not None or (self.seq or 1) > 1
        lead = (batch, num_steps or self.seq) if time_axis else (batch,)
        for leaf, spec in zip(leaves, self.flat.leaves, strict=True):
            assert leaf.shape == lead + spec.shape and leaf.dtype == spec.dtype
        valid_set = set(valid)
        for b, (row, time) in enumerate(drawn):
            assert (row, time) in valid_set
            expected = self.ref.window_leaves(row, time, lead[1] if time_axis else None)
            for leaf, want_leaf in zip(leaves, expected, strict=True):
                np.testing.assert_array_equal(leaf[b], want_leaf)

    @invariant()
    def stored_steps_match(self) -> None:
        if not hasattr(self, "buf"):
            return
        assert self.buf.num_frames() == len(self.buf) == self.ref.num_frames()
        assert self.buf.reader.steps_per_row().tolist() == self.ref.counts()
        for row in range(self.ref.num_envs):
            got = self.flat.treedef.flatten_up_to(self.buf.reader.gather_row(row))
            want = self.ref.row_leaves(row, len(got))
            for leaf, spec in zip(got, self.flat.leaves, strict=True):
                assert leaf.shape[0] == self.ref.counts()[row] and leaf.dtype == spec.dtype
            if want is not None:
                for g, w in zip(got, want, strict=True):
                    np.testing.assert_array_equal(g, w)
        if len(set(self.ref.counts())) == 1:
            np.testing.assert_array_equal(self.buf.reader.item_ids(), self.ref.item_ids())
        else:
            with pytest.raises(InvalidArgumentError, match="different numbers of steps"):
                self.buf.reader.item_ids()
        if self.kind == "prioritized":
            assert self.buf.reader.sampler.num_valid == len(
                self.ref.windows(self.seq, self.episodic)
            )

    @precondition(lambda self: hasattr(self, "buf"))
    @invariant()
    def ids_never_reused(self) -> None:
        index = self.buf.table.index
        assert index.t.tolist() == self.ref.index.times
        for row in range(self.ref.num_envs):
            ids = self.ref.row_ids(row)
            if ids:
                _, rows, times = rc.ids.decode(ids)
                assert (rows == row).all() and (times >= index.t_clear[row]).all()
                assert (times < self.ref.index.times[row]).all()


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
        st.tuples(
            st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
            st.lists(st.sampled_from([False, False, True]), min_size=4, max_size=4),
        ),
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
        elif isinstance(op, tuple):
            rows = [r for r in op[0] if r < num_envs] or [0]
            flags = op[1][: len(rows)]
            index.advance(np.array(rows), np.array(flags, bool))
            ref.advance(flags, rows)
        else:
            flags = op[:num_envs]
            index.advance(None, np.array(flags, bool))
            ref.advance(flags)
    return index, ref


def _windows(index: WindowIndex, n: int, within: bool) -> list[tuple[int, int]]:
    rows, times = index.segments(n, within).enumerate()
    return list(zip(rows.tolist(), times.tolist(), strict=True))


@settings(max_examples=150, deadline=None)
@given(num_envs=st.integers(1, 4), max_length=st.integers(1, 7), operations=ops)
def test_window_index_segments_equal_brute_force(num_envs, max_length, operations):
    index, ref = _drive(num_envs, max_length, operations)
    assert index.hi.tolist() == ref.times
    assert index.lo.tolist() == [ref.row_lo(r) for r in range(num_envs)]
    for n in range(1, max_length + 2):
        for within in (True, False):
            seg = index.segments(n, within)
            assert (seg.counts > 0).all()
            assert _windows(index, n, within) == ref.windows(n, within)
            assert index.count(n, within) == len(ref.windows(n, within))


@settings(max_examples=150, deadline=None)
@given(num_envs=st.integers(1, 4), max_length=st.integers(1, 7), operations=ops)
def test_window_index_state_round_trip_equals_incremental_log(num_envs, max_length, operations):
    index, _ = _drive(num_envs, max_length, operations)
    rebuilt = WindowIndex(num_envs, max_length)
    rebuilt.load_state_dict(index.state_dict())
    for n in range(1, max_length + 1):
        for within in (True, False):
            assert _windows(rebuilt, n, within) == _windows(index, n, within)
    # Both keep working identically after more writes.
    for flags in ([True] * num_envs, [False] * num_envs, [False] * num_envs):
        index.advance(None, np.array(flags))
        rebuilt.advance(None, np.array(flags))
        for n in range(1, max_length + 1):
            assert _windows(rebuilt, n, True) == _windows(index, n, True)


# -- the episode-end log grows with the ends stored ------------------------------
block_ops = st.lists(
    st.one_of(
        st.just("clear"),
        st.just("segments"),
        st.tuples(st.just("end"), st.lists(st.integers(0, 3), max_size=4, unique=True)),
        st.tuples(
            st.just("block"),
            st.integers(1, 40),
            st.floats(0.0, 1.0),
            st.integers(0, 2**31 - 1),
        ),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(num_envs=st.integers(1, 4), max_length=st.integers(1, 40), operations=block_ops)
def test_growing_end_log_equals_brute_force(num_envs, max_length, operations):
    """Blocks with dense or sparse ends, truncations and clears: the ring regrows and
    drops dead ends at any moment, and the windows still equal the brute-force ones."""
    index, ref = WindowIndex(num_envs, max_length), ReferenceWindows(num_envs, max_length)
    for op in operations:
        if op == "clear":
            index.clear()
            ref.clear()
        elif op == "segments":
            assert _windows(index, 2, True) == ref.windows(2, True)
        elif op[0] == "end":
            rows = np.array([r for r in op[1] if r < num_envs], np.int64)
            ended = index.end_episodes(rows)
            expected = [r for r in rows.tolist() if ref.flags[r] and not ref.flags[r][-1]]
            assert sorted(ended.tolist()) == sorted(expected)
            for r in expected:
                ref.flags[r][-1] = True
        else:
            count = min(op[1], max_length)
            flags = np.random.default_rng(op[3]).random((num_envs, count)) < op[2]
            index.advance_block(None, count, flags)
            for j in range(count):
                ref.advance(flags[:, j].tolist())
        assert index.hi.tolist() == ref.times
        slots = index.nbytes // 8 - 6 * num_envs  # ring slots of all rows
        assert slots <= num_envs * max_length  # never more than the old fixed ring
    for n in range(1, max_length + 2):
        for within in (True, False):
            assert _windows(index, n, within) == ref.windows(n, within)
    rebuilt = WindowIndex(num_envs, max_length)
    rebuilt.load_state_dict(index.state_dict())
    assert _windows(rebuilt, 2, True) == _windows(index, 2, True)


def test_end_log_stays_small_without_episode_ends():
    index = WindowIndex(8, 125_000)
    for _ in range(20):
        index.advance_block(None, 50_000, np.zeros((8, 50_000), bool))
    index.advance_block(None, 1000, np.eye(8, 1000, dtype=bool))
    assert index.nbytes <= 8 * 8 * (4 + 6)
    assert index.count(2, True) == 8 * 125_000 - 8 * 2
