"""n-step returns against brute-force Python on random episodes (terminations AND truncations)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import InvalidArgumentError, ShapeError


# -- TransitionBuffer ---------------------------------------------------------
def reference_transition(log, row, time, hi, n, gamma):
    """Walks forward over the logged transitions of one env: (reward, next_obs, term, trunc, k)."""
    total, k = 0.0, 0
    while True:
        _, reward, next_obs, term, trunc = log[row][time + k]
        total += gamma**k * reward
        k += 1
        chain_broken = time + k < hi and not np.array_equal(log[row][time + k][0], next_obs)
        if k == n or term or trunc or chain_broken or time + k == hi:
            return total, next_obs, term, trunc, k


@st.composite
def episodes(draw):
    num_envs = draw(st.integers(1, 3))
    max_length = draw(st.integers(1, 12))
    steps = draw(st.integers(1, 40))
    # per step and env: 0 continue, 1 terminated, 2 truncated, 3 reset without flags
    kinds = draw(st.lists(st.integers(0, 3), min_size=steps * num_envs, max_size=steps * num_envs))
    return num_envs, max_length, steps, kinds


@settings(max_examples=100, deadline=None)
@given(episodes(), st.integers(1, 6), st.sampled_from([0.0, 0.5, 0.9, 1.0]), st.booleans())
def test_transition_buffer_n_step_matches_brute_force(case, n, gamma, prioritized):
    num_envs, max_length, steps, kinds = case
    rng = np.random.default_rng(len(kinds))
    buf = rc.TransitionBuffer(num_envs * max_length, num_envs, rng=0, prioritized=prioritized)
    log = [[] for _ in range(num_envs)]
    obs = rng.integers(0, 100, (num_envs, 2)).astype(np.float32)
    for t in range(steps):
        kind = np.array(kinds[t * num_envs : (t + 1) * num_envs])
        reward = rng.integers(-3, 4, num_envs).astype(np.float16)
        next_obs = rng.integers(0, 100, (num_envs, 2)).astype(np.float32)
        term, trunc = kind == 1, kind == 2
        args = (obs, np.arange(num_envs, dtype=np.int32), reward, next_obs, term, trunc)
        buf.add(*(a[0] for a in args) if num_envs == 1 else args)
        for r in range(num_envs):
            log[r].append((obs[r], float(reward[r]), next_obs[r], bool(term[r]), bool(trunc[r])))
        reset = (kind != 0)[:, None]
        obs = np.where(reset, rng.integers(100, 200, (num_envs, 2)), next_obs).astype(np.float32)
    s = buf.sample(32, n_step=n, discount=gamma)
    _, rows, times = rc.ids.decode(s.ids)
    for b in range(32):
        ref = reference_transition(log, rows[b], times[b], steps, n, gamma)
        assert s.reward[b] == pytest.approx(ref[0], abs=1e-5)
        np.testing.assert_array_equal(s.next_observation[b], ref[1])
        assert (s.terminated[b], s.truncated[b]) == (ref[2], ref[3])
        assert s.discount[b] == pytest.approx(gamma ** ref[4])
        np.testing.assert_array_equal(s.observation[b], log[rows[b]][times[b]][0])
    assert s.reward.dtype == np.float32 and s.discount.dtype == np.float32


def test_transition_buffer_n_step_small_example():
    buf = rc.TransitionBuffer(100, rng=0)
    for i in range(10):  # episode ends: terminated after i=3, truncated after i=7
        buf.add(np.array([i], np.float32), 0, 1.0, np.array([i + 1], np.float32), i == 3, i == 7)
    s = buf.sample(200, n_step=3, discount=0.5)
    by_time = {int(t): b for b, t in enumerate(s.ids)}
    expect = {  # time: (reward, next obs, terminated, truncated, k)
        0: (1.75, 3, False, False, 3),
        2: (1.5, 4, True, False, 2),
        3: (1.0, 4, True, False, 1),
        5: (1.75, 8, False, True, 3),
        6: (1.5, 8, False, True, 2),
        9: (1.0, 10, False, False, 1),  # newest transition: cut at the buffer head
    }
    for t, (reward, nxt, term, trunc, k) in expect.items():
        b = by_time[t]
        assert (s.reward[b], s.next_observation[b, 0], s.terminated[b], s.truncated[b]) == (
            reward,
            nxt,
            term,
            trunc,
        )
        assert s.discount[b] == 0.5**k
    plain = buf.sample(4)
    assert plain.discount is None


def test_transition_buffer_n_step_errors():
    buf = rc.TransitionBuffer(10)
    buf.add(np.zeros(2, np.float32), 0, 1.0, np.ones(2, np.float32), False)
    with pytest.raises(InvalidArgumentError, match="needs a discount; got n_step=3"):
        buf.sample(2, n_step=3)
    with pytest.raises(InvalidArgumentError, match=r"`discount` must be a float in \[0, 1\]"):
        buf.sample(2, n_step=3, discount=1.5)
    with pytest.raises(InvalidArgumentError, match="`n_step` must be an int >= 1; got n_step=0"):
        buf.sample(2, n_step=0, discount=0.9)


# -- ReplayBuffer windows (RLDS) ------------------------------------------------
def reference_rlds(reward, is_last, is_terminal, gamma):
    n = len(reward) - 1
    total, k = 0.0, 0
    while k < n and not is_last[k]:
        total += gamma**k * reward[k]
        k += 1
    return total, gamma**k, bool(is_last[k] and is_terminal[k]), k


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(0, 10_000), st.sampled_from([0.0, 0.7, 0.99, 1.0]))
def test_replay_buffer_n_step_windows_match_brute_force(n, seed, gamma):
    rng = np.random.default_rng(seed)
    spec = {
        "observation": {"x": rc.ArraySpec((2,), np.float32), "id": rc.ArraySpec((), np.int32)},
        "action": rc.ArraySpec((), np.uint8),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
        "is_terminal": rc.ArraySpec((), bool),
    }
    buf = rc.ReplayBuffer(spec, 60, 2, rng=seed)
    for t in range(45):
        is_last = rng.random(2) < 0.25
        buf.add_batch(
            {
                "observation": {
                    "x": rng.random((2, 2)).astype(np.float32),
                    "id": np.full(2, t, np.int32),
                },
                "action": rng.integers(0, 4, 2).astype(np.uint8),
                "reward": rng.integers(-2, 3, 2).astype(np.float32),
                "is_last": is_last,
                "is_terminal": is_last & (rng.random(2) < 0.5),  # the others are truncations
            }
        )
    s = buf.sample(40, num_steps=n + 1, within_episode=False)
    out = rc.n_step_transitions(s.data, gamma)
    d = s.data
    for b in range(40):
        ref = reference_rlds(d["reward"][b], d["is_last"][b], d["is_terminal"][b], gamma)
        assert out["reward"][b] == pytest.approx(ref[0], abs=1e-5)
        assert out["discount"][b] == pytest.approx(ref[1])
        assert (out["terminated"][b], out["num_steps"][b]) == (ref[2], ref[3])
        assert out["next_observation"]["id"][b] == d["observation"]["id"][b, ref[3]]
        np.testing.assert_array_equal(out["observation"]["x"][b], d["observation"]["x"][b, 0])
    assert out["action"].shape == (40,)


def test_n_step_returns_shapes_and_errors():
    r = rc.n_step_returns(
        np.ones((2, 4, 3)), np.zeros((2, 4), bool), np.zeros((2, 4), bool), discount=0.5
    )
    assert (
        r.reward.shape == (2, 3) and r.reward[0, 0] == 1.75 and r.discount.tolist() == [0.125] * 2
    )
    with pytest.raises(ShapeError, match=r"got reward \(2, 1\), is_last \(2, 1\)"):
        rc.n_step_returns(np.ones((2, 1)), np.zeros((2, 1), bool), np.zeros((2, 1), bool), 0.9)
    with pytest.raises(InvalidArgumentError, match=r"got discount=-0\.1"):
        rc.n_step_returns(np.ones((2, 3)), np.zeros((2, 3), bool), np.zeros((2, 3), bool), -0.1)
