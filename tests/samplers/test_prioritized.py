"""Prioritized replay: distribution, weights, stale updates, validity, errors, state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import recollect as rc
from recollect.errors import InvalidArgumentError

SPEC = {
    "observation": rc.ArraySpec((3,), np.float32),
    "action": rc.ArraySpec((), np.int32),
    "pixels": rc.ArraySpec((2, 2), np.uint8),
    "reward": rc.ArraySpec((), np.float16),
    "is_last": rc.ArraySpec((), bool),
}


def make_step(rng: np.random.Generator, num_envs: int, p_last: float = 0.15) -> dict:
    return {
        "observation": rng.random((num_envs, 3)).astype(np.float32),
        "action": rng.integers(0, 5, num_envs).astype(np.int32),
        "pixels": rng.integers(0, 255, (num_envs, 2, 2)).astype(np.uint8),
        "reward": rng.random(num_envs).astype(np.float16),
        "is_last": rng.random(num_envs) < p_last,
    }


def make_buffer(capacity=40, num_envs=2, seq=2, steps=50, seed=0, spec=SPEC, **kw):
    sampler = rc.Prioritized(**kw)
    buf = rc.ReplayBuffer(spec, capacity, num_envs, sampler=sampler, sequence_length=seq, rng=seed)
    rng = np.random.default_rng(seed + 100)
    for _ in range(steps):
        step = make_step(rng, num_envs)
        buf.add_batch({k: step[k] for k in spec})
    return buf


def valid_ids(buf) -> np.ndarray:
    """All valid window ids, from the window index (the uniform sampler's ground truth)."""
    seg = buf.table.index.segments(buf.reader.sampler.sequence_length, buf.writer.episode_aware)
    rows, times = seg.enumerate()
    return np.sort(rc.ids.encode(rows, times))


def tree_values_by_id(buf, ids: np.ndarray) -> np.ndarray:
    _, rows, times = rc.ids.decode(ids)
    return buf.reader.sampler._tree[rows * buf.writer.max_length + times % buf.writer.max_length]


def test_sampling_frequencies_match_priorities_chi_square():
    alpha, eps = 0.6, 1e-6
    buf = make_buffer(capacity=40, num_envs=2, seq=3, steps=57, priority_exponent=alpha)
    ids = valid_ids(buf)
    rng = np.random.default_rng(5)
    for _ in range(3):  # arbitrary updates, with repeats and zeros
        chosen = rng.choice(ids, size=len(ids) // 2)
        prios = rng.exponential(2.0, len(chosen)) * (rng.random(len(chosen)) < 0.9)
        assert buf.update_priorities(chosen, prios) == 0
    expected = tree_values_by_id(buf, ids) / tree_values_by_id(buf, ids).sum()
    counts = np.zeros(len(ids))
    for _ in range(100):
        s = buf.sample(2000)
        pos = np.searchsorted(ids, s.ids)
        assert (ids[pos] == s.ids).all()
        np.testing.assert_allclose(s.probabilities, expected[pos], rtol=1e-12)
        counts += np.bincount(pos, minlength=len(ids))
    positive = expected > 0
    assert counts[~positive].sum() == 0
    _, p_value = stats.chisquare(counts[positive], counts.sum() * expected[positive])
    assert p_value > 1e-3
    # the tree holds (p + eps)^alpha of the last update of each id
    final = {}
    for i, p in zip(chosen.tolist(), prios.tolist(), strict=True):
        final[i] = p
    got = tree_values_by_id(buf, np.array(list(final)))
    np.testing.assert_allclose(got, (np.array(list(final.values())) + eps) ** alpha, rtol=1e-12)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_weights_match_formula(beta):
    buf = make_buffer(capacity=60, num_envs=3, seq=2, steps=45)
    ids = valid_ids(buf)
    buf.update_priorities(ids, np.random.default_rng(1).random(len(ids)) * 10)
    s = buf.sample(64, importance_sampling_exponent=beta)
    n = len(ids)
    w = (n * s.probabilities) ** -beta
    values = buf.reader.sampler._tree.values  # (p + eps)^alpha; P_min = min / total
    p_min = values[values > 0].min() / values.sum()
    np.testing.assert_allclose(s.weights, w / (n * p_min) ** -beta, rtol=1e-12)
    assert s.weights.dtype == np.float64 and s.weights.max() <= 1.0
    assert buf.reader.sampler.num_valid == n


def test_stale_ids_are_skipped_and_counted():
    buf = make_buffer(capacity=20, num_envs=2, seq=2, steps=15)
    old = buf.sample(8).ids
    rng = np.random.default_rng(3)
    for _ in range(10):  # overwrite every stored step
        buf.add_batch(make_step(rng, 2))
    before = buf.reader.sampler._tree.values.copy()
    live = valid_ids(buf)[:3]
    ids = np.concatenate([old, live, [-5]])
    skipped = buf.update_priorities(ids, np.full(len(ids), 3.0))
    assert skipped == len(old) + 1
    changed = np.flatnonzero(buf.reader.sampler._tree.values != before)
    assert len(changed) == len(live)
    assert buf.reader.sampler.max_priority == 3.0


@pytest.mark.parametrize("unissued", [10**9, 123456789, (1 << 40) * 2])  # time, time, row 2
def test_ids_never_issued_raise_naming_them_and_change_nothing(unissued):
    buf = make_buffer(capacity=20, num_envs=2, seq=2, steps=15)
    live = valid_ids(buf)[:3]
    before = buf.reader.sampler._tree.values.copy()
    ids = np.concatenate([live, [unissued]])
    with pytest.raises(
        InvalidArgumentError, match=rf"ids \[{unissued}\] \(1 of 4\) were never issued"
    ):
        buf.update_priorities(ids, np.full(len(ids), 3.0))
    np.testing.assert_array_equal(buf.reader.sampler._tree.values, before)


def test_cleared_windows_are_stale():
    buf = make_buffer(capacity=20, num_envs=2, seq=2, steps=15)
    ids = buf.sample(4).ids
    buf.clear()
    assert buf.reader.sampler._tree.total == 0.0
    assert buf.update_priorities(ids, np.ones(4)) == 4
    assert buf.update_priorities([-2, -1, -3], np.ones(3)) == 3


def test_new_windows_get_max_priority():
    alpha, eps = 0.5, 1e-6
    spec = {k: v for k, v in SPEC.items() if k != "is_last"}
    buf = make_buffer(capacity=30, num_envs=1, seq=2, steps=5, spec=spec, priority_exponent=alpha)
    assert buf.reader.sampler.max_priority == 1.0
    ids = valid_ids(buf)
    np.testing.assert_allclose(tree_values_by_id(buf, ids), (1.0 + eps) ** alpha)
    buf.update_priorities(ids[:2], np.array([7.0, 2.0]))
    buf.update_priorities(ids[2:3], np.array([0.5]))  # max is a running max
    assert buf.reader.sampler.max_priority == 7.0
    step = make_step(np.random.default_rng(0), 1)
    buf.add_batch({k: step[k] for k in spec})
    newest = valid_ids(buf)[-1]
    assert tree_values_by_id(buf, np.array([newest]))[0] == pytest.approx((7.0 + eps) ** alpha)


@st.composite
def histories(draw):
    num_envs = draw(st.integers(1, 3))
    max_length = draw(st.integers(2, 9))
    seq = draw(st.integers(1, max_length))
    events = draw(
        st.lists(
            st.one_of(
                st.just("clear"), st.lists(st.booleans(), min_size=num_envs, max_size=num_envs)
            ),
            max_size=40,
        )
    )
    return num_envs, max_length, seq, events


@settings(max_examples=80, deadline=None)
@given(histories())
def test_invalid_windows_always_have_zero_priority(history):
    num_envs, max_length, seq, events = history
    spec = {"observation": rc.ArraySpec((), np.float16), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(
        spec, num_envs * max_length, num_envs, sampler=rc.Prioritized(), sequence_length=seq
    )
    for event in events:
        if event == "clear":
            buf.clear()
            continue
        buf.add_batch({"observation": np.zeros(num_envs, np.float16), "is_last": np.array(event)})
        valid = valid_ids(buf)
        _, rows, times = rc.ids.decode(valid)
        expected = np.zeros(num_envs * max_length, bool)
        expected[rows * max_length + times % max_length] = True
        np.testing.assert_array_equal(buf.reader.sampler._tree.values > 0, expected)
        assert buf.reader.sampler.num_valid == len(valid)
        if len(valid):
            assert np.isin(buf.sample(16).ids, valid).all()


@pytest.mark.parametrize(
    ("priorities", "match"),
    [
        ([1.0, np.nan], r"finite and >= 0; got nan at position 1"),
        ([np.inf, 1.0], r"finite and >= 0; got inf at position 0"),
        ([1.0, -0.5], r"finite and >= 0; got -0.5 at position 1 \(1 bad"),
    ],
)
def test_bad_priorities_raise_and_change_nothing(priorities, match):
    buf = make_buffer()
    before = buf.reader.sampler._tree.values.copy()
    ids = valid_ids(buf)[:2]
    with pytest.raises(InvalidArgumentError, match=match):
        buf.update_priorities(ids, priorities)
    np.testing.assert_array_equal(buf.reader.sampler._tree.values, before)
    assert buf.reader.sampler.max_priority == 1.0


def test_argument_errors():
    buf = make_buffer()
    with pytest.raises(InvalidArgumentError, match=r"same shape; got ids shape \(2,\), prio"):
        buf.update_priorities(np.array([1, 2]), np.array([1.0]))
    with pytest.raises(InvalidArgumentError, match="integer ids"):
        buf.update_priorities(np.array([1.5]), np.array([1.0]))
    with pytest.raises(InvalidArgumentError, match="sequence_length=2; got num_steps=3"):
        buf.sample(4, num_steps=3)
    with pytest.raises(InvalidArgumentError, match="got within_episode=False"):
        buf.sample(4, within_episode=False)
    with pytest.raises(InvalidArgumentError, match="importance_sampling_exponent` must be a"):
        buf.sample(4, importance_sampling_exponent=-1.0)
    with pytest.raises(InvalidArgumentError, match="construct the buffer with sequence_length"):
        rc.ReplayBuffer(SPEC, 10, sampler=rc.Prioritized())
    with pytest.raises(InvalidArgumentError, match="priority_exponent` must be a finite"):
        rc.Prioritized(priority_exponent=-0.1)
    uniform = rc.ReplayBuffer(SPEC, 10)
    with pytest.raises(InvalidArgumentError, match="has no priorities"):
        uniform.update_priorities([0], [1.0])


def test_sample_has_time_axis_of_sequence_length():
    buf = make_buffer(capacity=40, num_envs=2, seq=3, steps=30)
    s = buf.sample(5)
    assert s.data["observation"].shape == (5, 3, 3)
    assert s.data["pixels"].dtype == np.uint8 and s.data["pixels"].shape == (5, 3, 2, 2)
    assert s.ids.dtype == np.int64 and s.probabilities.dtype == np.float64


def test_state_dict_round_trip_continues_identically():
    buf = make_buffer(capacity=40, num_envs=2, seq=2, steps=33)
    ids = valid_ids(buf)
    buf.update_priorities(ids, np.random.default_rng(2).random(len(ids)))
    state = buf.reader.sampler.state_dict()
    assert all(isinstance(v, np.ndarray | int | float) for v in state.values())
    twin = make_buffer(capacity=40, num_envs=2, seq=2, steps=33)
    twin.reader.sampler.load_state_dict(state)
    twin._rng = np.random.default_rng(9)
    buf._rng = np.random.default_rng(9)
    a, b = buf.sample(50), twin.sample(50)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.weights, b.weights)


def test_checkpoint_restores_priorities(tmp_path):
    buf = make_buffer(capacity=40, num_envs=2, seq=2, steps=33)
    ids = valid_ids(buf)
    buf.update_priorities(ids, np.random.default_rng(2).random(len(ids)))
    buf.save(tmp_path / "ckpt")
    restored = rc.ReplayBuffer.load(tmp_path / "ckpt")
    np.testing.assert_array_equal(
        restored.reader.sampler._tree.values, buf.reader.sampler._tree.values
    )
    np.testing.assert_array_equal(restored.sample(20).ids, buf.sample(20).ids)


def test_transition_buffer_prioritized():
    tb = rc.TransitionBuffer(50, num_envs=2, rng=0, prioritized=rc.Prioritized(0.7))
    rng = np.random.default_rng(0)
    for i in range(30):
        obs = rng.random((2, 3)).astype(np.float32)
        tb.add(obs, np.array([1, 2], np.int32), np.ones(2, np.float32), obs + 1, [i % 5 == 4] * 2)
    s = tb.sample(16, importance_sampling_exponent=1.0)
    w = (tb.num_frames() * s.probabilities) ** -1.0
    np.testing.assert_allclose(s.weights, w / w.max())
    assert tb.update_priorities(s.ids, np.arange(16.0)) == 0
    assert tb.replay_buffer.reader.sampler.max_priority == 15.0
    uniform = rc.TransitionBuffer(10)
    uniform.add(np.zeros(2, np.float32), 0, 1.0, np.ones(2, np.float32), False)
    with pytest.raises(InvalidArgumentError, match="needs a prioritized buffer"):
        uniform.sample(2, importance_sampling_exponent=0.4)
    with pytest.raises(InvalidArgumentError, match="`prioritized` must be True, False"):
        rc.TransitionBuffer(10, prioritized="yes")


def test_linear_schedule():
    beta = rc.LinearSchedule(0.4, 1.0, num_steps=100)
    assert beta(0) == 0.4 and beta(50) == pytest.approx(0.7) and beta(10**6) == 1.0
    with pytest.raises(InvalidArgumentError, match="`num_steps` must be an int >= 1; got 0"):
        rc.LinearSchedule(0.4, 1.0, num_steps=0)
    with pytest.raises(InvalidArgumentError, match="`step` must be >= 0; got step=-1"):
        beta(-1)


def test_all_zero_priorities_with_epsilon_zero_raise_not_enough_data():
    buf = make_buffer(capacity=20, num_envs=2, seq=2, steps=12, epsilon=0.0)
    ids = valid_ids(buf)
    buf.update_priorities(ids, np.zeros(len(ids)))
    with pytest.raises(rc.errors.NotEnoughDataError, match="every valid window has priority 0"):
        buf.sample(4)
    buf.update_priorities(ids[:1], [2.0])
    assert (buf.sample(50).ids == ids[0]).all()


def test_priorities_whose_sum_overflows_raise_and_change_nothing():
    buf = make_buffer(priority_exponent=1.0)
    before = buf.reader.sampler._tree.values.copy()
    ids = valid_ids(buf)[:3]
    with pytest.raises(InvalidArgumentError, match=r"priority 1e\+308 overflows: \(p \+ epsilon"):
        buf.update_priorities(ids, [1e308, 1e308, 1e308])
    np.testing.assert_array_equal(buf.reader.sampler._tree.values, before)
    assert buf.reader.sampler.max_priority == 1.0


def test_priorities_whose_power_overflows_raise_and_change_nothing():
    buf = make_buffer(priority_exponent=2.0)
    before = buf.reader.sampler._tree.values.copy()
    ids = valid_ids(buf)[:2]
    with pytest.raises(InvalidArgumentError, match=r"priority 1e\+200 overflows.*alpha=2\.0"):
        buf.update_priorities(ids, [1.0, 1e200])
    np.testing.assert_array_equal(buf.reader.sampler._tree.values, before)


def test_updating_no_priorities_returns_zero_skipped():
    buf = make_buffer()
    assert buf.update_priorities([], []) == 0
    assert buf.update_priorities(np.zeros(0, np.int64), np.zeros(0)) == 0


@st.composite
def row_histories(draw):
    num_envs = draw(st.integers(1, 3))
    max_length = draw(st.integers(1, 9))
    seq = draw(st.integers(1, max_length))
    event = st.one_of(
        st.just("clear"),
        st.tuples(st.just("end"), st.lists(st.integers(0, num_envs - 1), max_size=num_envs)),
        st.tuples(
            st.lists(st.integers(0, num_envs - 1), min_size=1, max_size=num_envs, unique=True),
            st.lists(st.booleans(), min_size=num_envs, max_size=num_envs),
        ),
    )
    return num_envs, max_length, seq, draw(st.lists(event, max_size=40))


@settings(max_examples=100, deadline=None)
@given(row_histories())
def test_valid_flags_give_the_start_times_a_start_array_would(history):
    """Rows at their own clocks, truncations, clears: the start times derived from the
    valid flags and the clocks are those of the window index's valid windows, and
    exactly the ids of valid windows update (a lap older is stale, a lap newer never issued)."""
    num_envs, max_length, seq, events = history
    spec = {"observation": rc.ArraySpec((), np.float16), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(
        spec, num_envs * max_length, num_envs, sampler=rc.Prioritized(), sequence_length=seq
    )
    for event in events:
        if event == "clear":
            buf.clear()
        elif event[0] == "end":
            buf.table.end_episodes(event[1])
        else:
            rows, flags = event
            step = {"observation": np.zeros(len(rows), np.float16), "is_last": np.array(flags)}
            buf.add_batch({k: v[: len(rows)] for k, v in step.items()}, rows=rows)
        valid = valid_ids(buf)
        _, rows, times = rc.ids.decode(valid)
        expected = np.full(num_envs * max_length, -1, np.int64)
        expected[rows * max_length + times % max_length] = times
        np.testing.assert_array_equal(buf.reader.sampler.state_dict()["start"], expected)
        assert buf.update_priorities(valid, np.ones(len(valid))) == 0
        older = rc.ids.encode(rows, times - max_length)[times >= max_length]
        newer = rc.ids.encode(rows, times + max_length)
        assert buf.update_priorities(older, np.ones(len(older))) == len(older)
        if len(newer):  # a lap newer: times the rows have not reached, never issued
            with pytest.raises(InvalidArgumentError, match="never issued"):
                buf.update_priorities(newer, np.ones(len(newer)))


def test_draws_between_writes_name_valid_windows():
    """The sampler keeps each row's oldest stored time for one index generation: draws
    after every kind of write (one row, all rows, a block, a clear) name valid windows."""
    buf = make_buffer(capacity=24, num_envs=3, seq=2, steps=20)
    rng = np.random.default_rng(7)
    for k in range(40):
        for _ in range(2):  # twice per generation: the second draw reuses the kept times
            assert np.isin(buf.sample(16).ids, valid_ids(buf)).all()
        step = make_step(rng, 3, p_last=0.0)
        if k % 4 == 0:
            buf.add_batch({key: v[k % 3 : k % 3 + 1] for key, v in step.items()}, rows=[k % 3])
        elif k % 4 == 1:
            buf.extend({key: np.stack([v] * 3, axis=1) for key, v in step.items()})
        elif k == 30:
            buf.clear()
            for _ in range(3):
                buf.add_batch(make_step(rng, 3, p_last=0.0))
        else:
            buf.add_batch(step)
