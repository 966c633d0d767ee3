"""The one-call ``add`` of one env (``recollect.sb3.adds``): CleanRL's exact arrays are
written by a single function (no converters, no ``write_step``), everything else the long
way, and both store what SB3's own buffer stores."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.buffers import ReplayBuffer as Sb3ReplayBuffer
from test_sb3_add_paths import FORMS, both, cleanrl_calls, same_as_sb3

import recollect as rc
import recollect.sb3
from recollect.buffers.transition_rows import one_row_adder
from recollect.sb3 import adds


@pytest.mark.parametrize("form", list(FORMS))
def test_exact_cleanrl_calls_skip_the_long_way(form, monkeypatch):
    ours, _, space, act = both(form, 8)
    calls = cleanrl_calls(space, act, 40, 3)
    ours.add(*calls[0])  # the one-copy layout builds its storage (and its adder) here
    assert ours.add_one is not None
    long_way = []
    real = adds.write_step
    monkeypatch.setattr(adds, "write_step", lambda *a: long_way.append(1) or real(*a))
    for call in calls[1:]:
        ours.add(*call)
    breaks = sum(bool(c[4][0]) for c in calls[:-1])  # a new episode breaks the chain
    assert len(long_way) == (breaks if form == "atari" else 0)


def vary(call: tuple, kind: int) -> tuple:
    """The same values in another form SB3's ``add`` takes (the long way writes them)."""
    obs, nxt, action, reward, done, infos = call
    if kind == 1:  # non-contiguous observation arrays of the same values
        obs = np.asfortranarray(obs) if obs.ndim > 2 else obs[:, ::1].T.copy().T
        nxt = np.asfortranarray(nxt) if nxt.ndim > 2 else nxt
    elif kind == 2:
        reward, done = reward.astype(np.float32), done.astype(np.float32)
    elif kind == 3:
        action, reward, done = action.tolist(), reward.tolist(), done.tolist()
    return obs, nxt, action, reward, done, infos


@pytest.mark.parametrize("form", list(FORMS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.integers(1, 25),
    size=st.integers(3, 9),
    seed=st.integers(0, 2**16),
    kinds=st.lists(st.integers(0, 3), min_size=25, max_size=25),
)
def test_exact_and_other_forms_store_what_sb3_stores(form, steps, size, seed, kinds):
    ours, theirs, space, act = both(form, size)
    for call, kind in zip(cleanrl_calls(space, act, steps, seed), kinds, strict=False):
        ours.add(*vary(call, kind))
        theirs.add(*call)
    same_as_sb3(ours, theirs, seed)


@pytest.mark.parametrize("form", list(FORMS))
def test_copies_and_checkpoints_keep_the_one_call_add(form, tmp_path):
    ours, theirs, space, act = both(form, 6)
    calls = cleanrl_calls(space, act, 20, 5)
    for call in calls[:9]:
        ours.add(*call)
        theirs.add(*call)
    dup = copy.deepcopy(ours)
    ours.save_checkpoint(tmp_path / "ck")
    loaded = type(ours).load_checkpoint(tmp_path / "ck", space, act, "cpu")
    for buf in (dup, loaded):
        assert buf.add_one is not None and buf.add_one is not ours.add_one
    for call in calls[9:]:
        for buf in (ours, dup, loaded, theirs):
            buf.add(*call)
    for buf in (ours, dup, loaded):
        same_as_sb3(buf, theirs, 0)


def test_one_row_adder_writes_nothing_on_a_broken_chain_or_other_values():
    tb = rc.TransitionBuffer(4, rng=0)
    obs = np.arange(3, dtype=np.float32)[None]
    step = (np.array([[1]]), np.array([0.5], np.float32))
    tb.add_batched(obs, *step, obs + 1, np.array([False]), np.array([False]))
    add_one = one_row_adder(tb)
    assert add_one is not None
    assert add_one(obs + 1, obs + 2, *step, np.array([False]))  # continues the chain
    assert not add_one(obs + 5, obs + 6, *step, np.array([False]))  # breaks it
    assert not add_one(obs + 2, obs + 3, np.array([1]), step[1], np.array([False]))  # [1]
    assert not add_one(obs + 2, obs + 3, step[0], np.array([0.5]), np.array([False]))  # f64
    assert len(tb) == 2 and tb.clock() == 2
    tb.add_batched(obs + 5, *step, obs + 6, np.array([True]), np.array([False]))  # long way
    s = tb.sample_at([0, 0, 0], [0, 1, 2])
    assert s.next_observation[:, 0].tolist() == [1.0, 2.0, 6.0]  # the broken chain's kept
    assert add_one(obs + 6, obs + 7, *step, np.array([True]))
    assert tb.sample_at([0], [3]).terminated.tolist() == [True]


def test_no_one_call_add_where_it_does_not_apply():
    box = gym.spaces.Box(-1, 1, (2,), np.float32)
    cases = [
        {"n_envs": 2, "handle_timeout_termination": False},
        {"handle_timeout_termination": True},
        {"frame_stack": 2, "handle_timeout_termination": False},
    ]
    for kwargs in cases:
        space = gym.spaces.Box(0, 255, (2, 3), np.uint8) if "frame_stack" in kwargs else box
        buf = recollect.sb3.ReplayBuffer(8, space, gym.spaces.Discrete(2), "cpu", **kwargs)
        n = buf.n_envs
        obs = np.zeros((n, *space.shape), space.dtype)
        buf.add(obs, obs, np.zeros(n, np.int64), np.zeros(n), np.zeros(n, bool), {})
        assert buf.add_one is None, kwargs
    assert Sb3ReplayBuffer  # SB3's own buffer is the reference of the tests above
