"""TransitionBuffer: exact (s, a, r, s', terminated, truncated), observations stored once."""

from __future__ import annotations

import numpy as np
import optree
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import InvalidArgumentError, NotEnoughDataError, ShapeError, SpecError
from reference import ReferenceTransitions


def fresh_obs(value: int) -> dict:
    """A nested observation with mixed dtypes; distinct values give distinct observations."""
    return {
        "pos": np.array([value, -value], np.float32),
        "img": np.full((2, 2), value % 251, np.uint8),
    }


def stack(trees: list) -> object:
    return optree.tree_map(lambda *xs: np.stack(xs), *trees)


def check_sample(buf: rc.TransitionBuffer, ref: ReferenceTransitions, batch_size: int = 64):
    """Every sampled transition equals the reference transition with the same id."""
    stored = ref.by_id()
    if not stored:
        with pytest.raises(NotEnoughDataError, match="empty"):
            buf.sample(batch_size)
        return
    s = buf.sample(batch_size)
    assert len(buf) == len(stored)
    np.testing.assert_array_equal(s.probabilities, 1.0 / len(stored))
    for b, item_id in enumerate(s.ids.tolist()):
        want = stored[item_id]
        for field in ("observation", "next_observation"):
            got = optree.tree_map(lambda x, b=b: x[b], getattr(s, field))
            optree.tree_map(np.testing.assert_array_equal, got, want[field])
        assert s.action[b] == want["action"] and s.reward[b] == want["reward"]
        assert s.terminated[b] == want["terminated"] and s.truncated[b] == want["truncated"]


step_ops = st.lists(
    st.one_of(
        st.just("clear"),
        st.tuples(
            st.lists(st.sampled_from([True, True, True, False]), min_size=3, max_size=3),
            st.lists(st.sampled_from([False, False, False, True]), min_size=3, max_size=3),
            st.lists(st.sampled_from([False, False, False, True]), min_size=3, max_size=3),
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(
    num_envs=st.integers(1, 3), max_length=st.integers(1, 5), ops=step_ops, seed=st.integers(0, 99)
)
def test_transitions_replay_exactly_against_reference(num_envs, max_length, ops, seed):
    """Random chains, breaks, terminations, truncations, clears and wraparound."""
    buf = rc.TransitionBuffer(num_envs * max_length, num_envs, rng=seed)
    ref = ReferenceTransitions(num_envs, max_length)
    counter = 0
    previous_next: list = [None] * num_envs
    for op in ops:
        if op == "clear":
            buf.clear()
            ref.clear()
        else:
            chained, terminated, truncated = (x[:num_envs] for x in op)
            rows = []
            for r in range(num_envs):
                obs = previous_next[r] if chained[r] and previous_next[r] is not None else None
                if obs is None:
                    obs, counter = fresh_obs(counter), counter + 1
                nxt, counter = fresh_obs(counter), counter + 1
                rows.append(
                    dict(
                        observation=obs,
                        action=np.int32(counter),
                        reward=np.float32(counter / 4),
                        next_observation=nxt,
                        terminated=terminated[r],
                        truncated=truncated[r],
                    )
                )
                previous_next[r] = nxt
            if num_envs == 1:
                buf.add(**rows[0])
            else:
                buf.add(**{k: stack([row[k] for row in rows]) for k in rows[0]})
            ref.add(rows)
        check_sample(buf, ref)


def run_episode_sequence(buf, ref, specs):
    """Adds single-env transitions given as (obs, next_obs, terminated, truncated)."""
    for k, (obs, nxt, term, trunc) in enumerate(specs):
        row = dict(
            observation=np.array(obs, np.float32),
            action=k,
            reward=float(k),
            next_observation=np.array(nxt, np.float32),
            terminated=term,
            truncated=trunc,
        )
        buf.add(**row)
        ref.add([row])


@pytest.mark.parametrize("flag", ["terminated", "truncated", "broken chain"])
def test_next_observation_exact_after_episode_end(flag):
    buf = rc.TransitionBuffer(capacity=16, rng=0)
    ref = ReferenceTransitions(1, 16)
    end = {"terminated": (True, False), "truncated": (False, True), "broken chain": (False, False)}
    term, trunc = end[flag]
    run_episode_sequence(
        buf,
        ref,
        [
            ([0, 0], [1, 1], False, False),
            ([1, 1], [2, 2], term, trunc),  # episode ends; the final observation is [2, 2]
            ([9, 9], [10, 10], False, False),  # reset observation, not [2, 2]
            ([10, 10], [11, 11], False, False),
        ],
    )
    s = buf.sample(200)
    second = s.ids == 1
    assert second.any()
    np.testing.assert_array_equal(s.next_observation[second], [[2, 2]] * second.sum())
    assert (s.terminated[second] == term).all() and (s.truncated[second] == trunc).all()
    check_sample(buf, ref)


def test_wraparound_with_breaks_single_and_multi_env():
    for num_envs in (1, 3):
        buf = rc.TransitionBuffer(capacity=4 * num_envs, num_envs=num_envs, rng=1)
        ref = ReferenceTransitions(num_envs, 4)
        obs = np.zeros((num_envs, 3), np.float16)
        for t in range(23):
            nxt = np.full((num_envs, 3), t + 1, np.float16) + np.arange(num_envs)[:, None]
            term = (np.arange(num_envs) + t) % 5 == 0
            rows = [
                dict(
                    observation=obs[r],
                    action=np.int32(t),
                    reward=np.float32(t),
                    next_observation=nxt[r],
                    terminated=term[r],
                    truncated=False,
                )
                for r in range(num_envs)
            ]
            if num_envs == 1:
                buf.add(obs[0], np.int32(t), np.float32(t), nxt[0], bool(term[0]))
            else:
                buf.add(
                    obs, np.full(num_envs, t, np.int32), np.full(num_envs, t, np.float32), nxt, term
                )
            ref.add(rows)
            obs = np.where(term[:, None], -nxt, nxt)  # reset after a termination
            check_sample(buf, ref)


def test_chained_observations_are_stored_once():
    shape = (32, 32, 3)
    capacity = 512
    buf = rc.TransitionBuffer(capacity=capacity, rng=0)
    obs = np.zeros(shape, np.uint8)
    for t in range(3 * capacity):
        nxt = np.full(shape, (t + 1) % 256, np.uint8)
        done = t % 100 == 99
        buf.add(obs, t, 1.0, nxt, done)
        obs = np.full(shape, 200, np.uint8) if done else nxt
    obs_bytes = int(np.prod(shape))
    other_bytes = 8 + 8 + 1 + 1  # int64 action, float64 reward, two bools
    one_copy = capacity * (obs_bytes + other_bytes)
    two_copies = capacity * (2 * obs_bytes + other_bytes)
    assert buf.nbytes < 1.2 * one_copy, (buf.nbytes, one_copy)
    assert buf.nbytes < 0.65 * two_copies
    s = buf.sample(640)  # 2 MB of observations: the multi-threaded gather path
    np.testing.assert_array_equal(s.next_observation[:, 0, 0, 0], (s.ids + 1) % 256)
    np.testing.assert_array_equal(s.next_observation[:, -1, -1, -1], (s.ids + 1) % 256)
    after_reset = s.ids % 100 == 0
    np.testing.assert_array_equal(
        s.observation[:, 0, 0, 0], np.where(after_reset, 200, s.ids % 256)
    )
    np.testing.assert_array_equal(s.terminated, s.ids % 100 == 99)


def test_nested_observation_and_action():
    buf = rc.TransitionBuffer(capacity=8, num_envs=2, rng=0)
    obs = {"pixels": np.zeros((2, 4), np.uint8), "vec": (np.zeros((2, 2), np.float32),)}
    for t in range(5):
        nxt = optree.tree_map(lambda x, t=t: np.full_like(x, t + 1), obs)
        action = {"move": np.full(2, t, np.int32), "jump": np.array([True, False])}
        buf.add(obs, action, np.zeros(2, np.float32), nxt, np.array([False, t == 2]))
        obs = nxt
    s = buf.sample(64)
    assert s.observation["pixels"].shape == (64, 4) and isinstance(s.observation["vec"], tuple)
    assert s.action["jump"].dtype == np.bool_
    times = rc.ids.decode(s.ids)[2]
    np.testing.assert_array_equal(s.next_observation["pixels"][:, 0], times + 1)
    np.testing.assert_array_equal(s.next_observation["vec"][0][:, 1], times + 1)


def test_mismatched_shapes_raise_and_change_nothing():
    buf = rc.TransitionBuffer(capacity=8, rng=0)
    buf.add(np.zeros(3, np.float32), 0, 0.0, np.ones(3, np.float32), False)
    with pytest.raises(ShapeError, match=r"next_observation leaf '<root>'.*\(1, 3\).*\(1, 4\)"):
        buf.add(np.ones(3, np.float32), 1, 0.0, np.ones(4, np.float32), False)
    with pytest.raises(ShapeError, match=r"'observation'.*expected shape \(1, 3\)"):
        buf.add(np.ones(2, np.float32), 1, 0.0, np.ones(3, np.float32), False)
    with pytest.raises(ShapeError, match=r"'action'"):
        buf.add(np.ones(3, np.float32), [1, 2], 0.0, np.ones(3, np.float32), False)
    with pytest.raises(SpecError, match=r"'observation': expected an array.*got dict"):
        buf.add({"a": np.ones(3, np.float32)}, 1, 0.0, np.ones(3, np.float32), False)
    with pytest.raises(SpecError, match=r"'action': expected an array.*got list"):
        buf.add(np.ones(3, np.float32), [1, [2, 3]], 0.0, np.ones(3, np.float32), False)
    assert len(buf) == 1
    s = buf.sample(4)  # the pending next_observation of the first add is intact
    np.testing.assert_array_equal(s.next_observation, np.ones((4, 3), np.float32))


def test_multi_env_leading_dim_errors():
    buf = rc.TransitionBuffer(capacity=8, num_envs=2, rng=0)
    buf.add(
        np.zeros((2, 3)), np.zeros(2, np.int64), np.zeros(2), np.ones((2, 3)), np.zeros(2, bool)
    )
    with pytest.raises(ShapeError, match=r"'terminated'.*\(2,\).*\(3,\)"):
        buf.add(
            np.zeros((2, 3)), np.zeros(2, np.int64), np.zeros(2), np.ones((2, 3)), np.zeros(3, bool)
        )


def test_sample_on_empty_raises():
    buf = rc.TransitionBuffer(capacity=4, rng=0)
    assert len(buf) == 0 and buf.nbytes == 0
    with pytest.raises(NotEnoughDataError, match="empty"):
        buf.sample(1)
    buf.add(np.zeros(2), 0, 0.0, np.ones(2), False)
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        buf.sample(0)
    buf.clear()
    with pytest.raises(NotEnoughDataError, match="empty"):
        buf.sample(1)


def test_ids_keep_increasing_across_clear():
    buf = rc.TransitionBuffer(capacity=4, num_envs=2, rng=0)
    for _ in range(3):
        buf.add(np.zeros((2, 1)), np.zeros(2, np.int64), np.zeros(2), np.ones((2, 1)), [False] * 2)
    buf.clear()
    buf.add(np.zeros((2, 1)), np.zeros(2, np.int64), np.zeros(2), np.ones((2, 1)), [False] * 2)
    assert set(buf.sample(32).ids.tolist()) == set(rc.ids.encode([0, 1], 3).tolist())


def test_final_observations_ring_grows_and_wraps_with_live_entries():
    """Many broken chains over several wraparounds (the side ring grows past its first size)."""
    num_envs, max_length = 3, 70
    buf = rc.TransitionBuffer(num_envs * max_length, num_envs, rng=5)
    ref = ReferenceTransitions(num_envs, max_length)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(num_envs, 2)).astype(np.float32)
    for t in range(400):
        nxt = rng.normal(size=(num_envs, 2)).astype(np.float32)
        term = rng.random(num_envs) < 0.1
        action, reward = np.full(num_envs, t, np.int32), rng.normal(size=num_envs)
        buf.add(obs, action, reward, nxt, term, False)
        ref.add(
            [
                dict(observation=obs[r], action=action[r], reward=reward[r],
                     next_observation=nxt[r], terminated=term[r], truncated=False)
                for r in range(num_envs)
            ]
        )  # fmt: skip
        broken = rng.random(num_envs) < (0.9 if t < 250 else 0.05)  # many breaks, then few
        obs = np.where(broken[:, None], rng.normal(size=(num_envs, 2)).astype(np.float32), nxt)
        if t % 50 == 49:
            check_sample(buf, ref, 256)
    assert buf._reader.finals.size > 64
    check_sample(buf, ref, 1024)


def test_chain_is_bitwise_negative_zero_and_nan():
    """-0.0 == 0.0 but is not the same observation; NaN != NaN but is (and chains)."""
    buf = rc.TransitionBuffer(capacity=8, rng=0)
    buf.add(np.array([0.0, 5.0]), 0, 0.0, np.array([-0.0, np.nan]), False)
    buf.add(np.array([0.0, np.nan]), 1, 0.0, np.array([1.0, np.nan]), False)  # breaks: -0.0
    buf.add(np.array([1.0, np.nan]), 2, 0.0, np.array([2.0, 2.0]), False)  # chains: NaN
    assert buf._reader.finals.n == 1
    s = buf.sample(64)
    first = s.next_observation[s.ids == 0]
    assert len(first) and np.signbit(first[:, 0]).all() and np.isnan(first[:, 1]).all()
    second = s.next_observation[s.ids == 1]
    assert len(second) and (second[:, 0] == 1.0).all() and np.isnan(second[:, 1]).all()


def test_env_reusing_one_array_in_place():
    """Vector envs may return the same array object each step, mutated in place."""
    buf = rc.TransitionBuffer(capacity=6, num_envs=2, rng=0)
    obs = np.zeros((2, 3), np.float32)
    nxt = np.zeros((2, 3), np.float32)
    for t in range(5):
        nxt[...] = t + 1  # same object every step
        buf.add(obs, np.full(2, t), np.zeros(2), nxt, np.zeros(2, bool))
        obs[...] = nxt
    nxt[...] = -1
    s = buf.sample(64)
    times = rc.ids.decode(s.ids)[2]
    np.testing.assert_array_equal(s.observation[:, 0], times)
    np.testing.assert_array_equal(s.next_observation[:, 0], times + 1)


def test_int_first_reward_is_stored_as_float32_so_later_float_rewards_fit():
    buf = rc.TransitionBuffer(capacity=8, rng=0)
    obs = np.zeros(2, np.float32)
    buf.add(obs, 0, 0, obs + 1, False)
    buf.add(obs + 1, 1, 0.5, obs + 2, False)
    rewards = sorted(set(buf.sample(64).reward.tolist()))
    assert rewards == [0.0, 0.5]
    assert buf.sample(1).reward.dtype == np.float32


@pytest.mark.parametrize("terminated", [[True, False], np.zeros((1, 1), bool)])
def test_terminated_of_the_wrong_shape_raises_shape_error(terminated):
    buf = rc.TransitionBuffer(10)
    obs = np.zeros(3, np.float32)
    with pytest.raises(ShapeError, match=r"leaf 'terminated': expected shape \(1,\), got"):
        buf.add(obs, 0, 1.0, obs, terminated)
    with pytest.raises(ShapeError, match=r"leaf 'truncated': expected shape \(1,\), got \(2,\)"):
        buf.add(obs, 0, 1.0, obs, False, [False, True])
    assert buf.num_frames() == 0


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_rejected_first_add_does_not_fix_the_inferred_spec(prioritized):
    buf = rc.TransitionBuffer(10, prioritized=prioritized)
    with pytest.raises(ShapeError, match=r"add next_observation"):
        buf.add(np.zeros(3, np.float32), 0, 1.0, np.zeros(4, np.float32), False)
    assert buf.num_frames() == 0
    buf.add(np.ones(5, np.int16), 2, 1.0, np.ones(5, np.int16), False)  # another spec: accepted
    sample = buf.sample(2)
    assert sample.observation.shape == (2, 5) and sample.observation.dtype == np.int16


def _frames_and_stack(count):
    frames = np.random.default_rng(0).integers(0, 255, (count, 2, 2)).astype(np.uint8)

    def stack(i):  # reset padding: the episode starts at frame 0
        return np.stack([frames[max(j, 0)] for j in range(i - 2, i + 1)], -1)

    return stack


def _sampled_pairs_are_passed(buf, passed):
    sample = buf.sample(64)
    for obs, nxt in zip(sample.observation, sample.next_observation, strict=True):
        assert any(np.array_equal(obs, a) and np.array_equal(nxt, b) for a, b in passed)


def test_frame_stack_transitions_after_clear_come_back_exactly_as_passed():
    stack = _frames_and_stack(20)
    buf = rc.TransitionBuffer(20, frame_stack=rc.FrameStack(3, padding="reset"), rng=0)
    for i in range(5):
        buf.add(stack(i), 0, 1.0, stack(i + 1), False)
    buf.clear()
    passed = [(stack(i), stack(i + 1)) for i in range(5, 9)]  # the episode goes on
    for obs, nxt in passed:
        buf.add(obs, 0, 1.0, nxt, False)
    assert buf.num_frames() == 4
    _sampled_pairs_are_passed(buf, passed)


def test_sample_source_members_draw_stream_and_refuse_num_steps():
    """TransitionBuffer's own SampleSource members: draw(b, None)() is sample(b), a stream
    yields converted samples, and a num_steps is refused with the time_steps message."""
    buf = rc.TransitionBuffer(8, rng=0)
    for i in range(4):
        buf.add(np.full(2, i, np.float32), i, float(i), np.full(2, i + 1, np.float32), False)
    assert buf.remote is False and buf.closed is False
    s = buf.draw(3, None)()
    np.testing.assert_array_equal(s.next_observation, s.observation + 1)
    with pytest.raises(InvalidArgumentError, match="num_steps must be None; got num_steps=2"):
        buf.draw(3, 2)
    stream = buf.stream(2, None, convert=lambda x: x.reward.shape)
    try:
        assert next(stream) == (2,)
    finally:
        stream.close()
