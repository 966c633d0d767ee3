"""The short ``add`` paths of ``recollect.sb3.ReplayBuffer`` in CleanRL's call forms.

- SB3's layout, one env, no timeouts (``dqn.py``, ``sac_continuous_action.py``): the
  step is written by ``Sb3Arrays.step_writer``'s one-row writer (no ``write_leaves``).
- one copy per observation (``dqn_atari.py``: ``optimize_memory_usage=True``): the
  values go to ``TransitionBuffer.add_batched`` with their env dim, taken as they are
  when exact (no ``convert_step``), else converted as ``add`` does.

Each stores what SB3's own buffer stores for the same calls, and does its work on
the calling thread (no thread is started, none is handed the write).
"""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.buffers import ReplayBuffer as Sb3ReplayBuffer

import recollect as rc
import recollect.buffers.transition_reads as transition_reads
import recollect.sb3
from recollect.errors import ShapeError

BOX4 = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
PENDULUM_ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
FRAMES = gym.spaces.Box(0, 255, (4, 6, 6), np.uint8)  # small frame stacks


def cleanrl_calls(space: gym.spaces.Box, act: gym.spaces.Space, steps: int, seed: int) -> list:
    """CleanRL's ``add`` arguments: env dim 1, float64 rewards, bool terminations, dict infos;
    stacks that share all but their newest frame, chains broken at episode ends."""
    rng = np.random.default_rng(seed)
    obs = np.asarray(rng.uniform(0, 255, (1, *space.shape)), space.dtype)
    out = []
    for t in range(steps):
        nxt = np.roll(obs, -1, axis=1).copy()
        nxt[:, -1] = np.asarray(rng.uniform(0, 255, nxt.shape[2:]), space.dtype)
        done = rng.random(1) < 0.2
        if isinstance(act, gym.spaces.Discrete):
            action = rng.integers(0, act.n, 1)
        else:
            action = rng.uniform(-2, 2, (1, 1)).astype(np.float32)
        infos = {"_episode": np.array([True])} if done[0] else {}
        out.append((obs, nxt, action, rng.standard_normal(1), done, infos))
        obs = np.asarray(rng.uniform(0, 255, obs.shape), space.dtype) if done[0] else nxt
        del t
    return out


FORMS = {
    "cartpole": (BOX4, gym.spaces.Discrete(2), {}),
    "pendulum": (BOX4, PENDULUM_ACT, {}),
    "atari": (FRAMES, gym.spaces.Discrete(4), {"optimize_memory_usage": True}),
}


def both(form: str, size: int) -> tuple:
    space, act, kwargs = FORMS[form]
    kw = {"handle_timeout_termination": False, **kwargs}
    ours = recollect.sb3.ReplayBuffer(size, space, act, "cpu", rng=0, **kw)
    theirs = Sb3ReplayBuffer(size, space, act, "cpu", **kw)
    return ours, theirs, space, act


@pytest.mark.parametrize("form", list(FORMS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.integers(1, 30), size=st.integers(3, 12), seed=st.integers(0, 2**16))
def test_short_paths_store_what_sb3_stores(form, steps, size, seed):
    ours, theirs, space, act = both(form, size)
    for call in cleanrl_calls(space, act, steps, seed):
        ours.add(*call)
        theirs.add(*call)
    same_as_sb3(ours, theirs, seed)


def same_as_sb3(ours, theirs, seed: int) -> None:
    """``ours`` (recollect.sb3) holds what SB3's buffer ``theirs`` holds: position, fill and
    every stored transition, read through ``_get_samples`` with the same RNG state."""
    assert (ours.pos, ours.full) == (theirs.pos, theirs.full)
    upper = theirs.buffer_size if theirs.full else theirs.pos
    inds = np.arange(upper)
    if theirs.optimize_memory_usage and theirs.full:  # SB3 overwrote the oldest's obs
        inds = inds[inds != theirs.pos]
    if not len(inds):
        return
    np.random.seed(seed)  # noqa: NPY002 - _get_samples draws envs from numpy's global RNG
    a = ours._get_samples(inds)
    np.random.seed(seed)  # noqa: NPY002
    b = theirs._get_samples(inds)
    for name in ("observations", "actions", "rewards", "dones"):
        assert th_equal(getattr(a, name), getattr(b, name)), name
    # at an episode end SB3's optimize_memory_usage returns the next episode's first
    # observation as next observation (it overwrote the final one); recollect keeps it
    live = b.dones[:, 0].numpy() == 0 if theirs.optimize_memory_usage else slice(None)
    assert th_equal(a.next_observations[live], b.next_observations[live])


def th_equal(x, y) -> bool:
    return bool((x.cpu().numpy() == y.cpu().numpy()).all()) and x.dtype == y.dtype


def test_one_env_sb3_layout_uses_the_one_row_writer():
    buf = recollect.sb3.ReplayBuffer(
        10, BOX4, gym.spaces.Discrete(2), "cpu", handle_timeout_termination=False, rng=0
    )
    core = buf.transitions.replay_buffer
    assert buf.write_leaves is not core.writer.write_leaves  # the one-row writer
    two = recollect.sb3.ReplayBuffer(
        10, BOX4, gym.spaces.Discrete(2), "cpu", n_envs=2, handle_timeout_termination=False
    )
    assert two.write_leaves == two.transitions.replay_buffer.writer.write_leaves  # several rows


def test_one_row_writer_records_each_step_in_the_table():
    buf = recollect.sb3.ReplayBuffer(
        4, BOX4, gym.spaces.Discrete(2), "cpu", handle_timeout_termination=False, rng=0
    )
    for k in range(6):
        obs = np.full((1, 4), k, np.float32)
        buf.add(obs, obs + 1, np.array([k % 2]), np.array([float(k)]), np.array([k == 5]), {})
    core = buf.transitions.replay_buffer
    assert core.table.clock == 6 and core.num_frames() == 4 and buf.full and buf.pos == 2
    assert buf.rewards[:, 0].tolist() == [4.0, 5.0, 2.0, 3.0]
    assert buf.dones[:, 0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert buf.actions[:, 0, 0].tolist() == [0, 1, 0, 1]


def test_exact_values_skip_conversion_in_add_batched(monkeypatch):
    tb = rc.TransitionBuffer(8, rng=0)
    obs = np.zeros((1, 3), np.float32)
    args = (obs, np.array([[1]]), np.array([0.5], np.float32), obs + 1)
    tb.add_batched(*args, np.array([False]), np.array([False]))  # infers the spec

    def refuse(*a, **k):
        raise AssertionError("convert_step called for exact values")

    monkeypatch.setattr(transition_reads, "convert_step", refuse)
    tb.add_batched(obs + 1, *args[1:3], obs + 2, np.array([True]), np.array([False]))
    s = tb.sample_at([0, 0], [0, 1])
    assert s.next_observation[:, 0].tolist() == [1.0, 2.0]
    assert s.terminated.tolist() == [False, True]


def test_add_batched_converts_or_rejects_as_add():
    tb = rc.TransitionBuffer(8, rng=0)
    obs = np.zeros((1, 3), np.float32)
    tb.add_batched(obs, np.array([[1]]), np.array([0.5], np.float32), obs, [False], [False])
    tb.add_batched(obs.astype(np.float16), [[2]], [1.0], obs, [True], [False])  # converted
    assert tb.sample_at([0], [1]).action.tolist() == [[2]]
    with pytest.raises(ShapeError, match="observation"):
        tb.add_batched(np.zeros((1, 4), np.float32), [[1]], [0.0], obs, [False], [False])
    assert len(tb) == 2  # nothing written


@pytest.mark.parametrize("n_envs", [1, 3])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_add_batched_stores_what_add_stores(n_envs, data):
    """Chains, breaks and bitwise compares (NaN chains, -0.0 does not chain to 0.0)."""
    values = st.sampled_from([0.0, -0.0, 1.0, np.nan])
    a, b = rc.TransitionBuffer(6 * n_envs, n_envs, rng=0), rc.TransitionBuffer(6 * n_envs, n_envs)
    prev = np.zeros((n_envs, 2), np.float32)
    for _ in range(data.draw(st.integers(1, 12))):
        keep = np.array(data.draw(st.lists(st.booleans(), min_size=n_envs, max_size=n_envs)))
        fresh = np.array(
            data.draw(st.lists(values, min_size=2 * n_envs, max_size=2 * n_envs)), np.float32
        ).reshape(n_envs, 2)
        obs = np.where(keep[:, None], prev, fresh).astype(np.float32)
        nxt = np.array(
            data.draw(st.lists(values, min_size=2 * n_envs, max_size=2 * n_envs)), np.float32
        ).reshape(n_envs, 2)
        act, rew, term = np.zeros((n_envs, 1)), np.ones(n_envs, np.float32), ~keep
        trunc = np.zeros(n_envs, bool)
        a.add_batched(obs, act, rew, nxt, term, trunc)
        if n_envs == 1:
            b.add(obs[0], act[0], rew[0], nxt[0], term, trunc)
        else:
            b.add(obs, act, rew, nxt, term, trunc)
        prev = nxt
    steps = len(a) // n_envs
    times, rows = np.divmod(np.arange(len(a)), n_envs)
    times = times + a.clock() - steps
    x, y = a.sample_at(rows, times), b.sample_at(rows, times)
    for name in ("observation", "next_observation", "terminated"):
        got, want = np.asarray(getattr(x, name)), np.asarray(getattr(y, name))
        assert got.tobytes() == want.tobytes(), name


@pytest.mark.parametrize("form", list(FORMS))
def test_a_one_env_add_writes_on_the_calling_thread(form, monkeypatch):
    ours, _, space, act = both(form, 8)
    calls = cleanrl_calls(space, act, 12, 0)
    ours.add(*calls[0])  # first add: builds the storage
    threads = set(threading.enumerate())

    def refuse(self):
        raise AssertionError(f"add started a thread {self.name}")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    for call in calls[1:]:
        before = ours.clock()
        ours.add(*call)
        assert ours.clock() == before + 1  # stored when add returns: nothing left pending
    assert set(threading.enumerate()) == threads
