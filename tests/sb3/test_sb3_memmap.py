"""recollect.sb3 buffers with storage="memmap": frame-stacked, compressed Atari-like
observations in files sample exactly what the same buffer in RAM samples."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recollect.sb3
from recollect.errors import InvalidArgumentError

SPACE = gym.spaces.Box(0, 255, (6, 6, 4), np.uint8)  # VecFrameStack(4) of 6x6 frames
ACT = gym.spaces.Discrete(3)
FIELDS = (
    "ids",
    "weights",
    "observations",
    "next_observations",
    "actions",
    "rewards",
    "dones",
    "discounts",
)


def pair(tmp, cls, size, n_envs, **kw):
    """The same buffer on memmap storage and in RAM (same seed)."""
    common = dict(n_envs=n_envs, frame_stack=4, compression="zstd", rng=7, **kw)
    disk = cls(size, SPACE, ACT, "cpu", storage="memmap", directory=tmp / "buf", **common)
    return disk, cls(size, SPACE, ACT, "cpu", **common)


def play(bufs, n_envs, steps):
    """VecFrameStack-like adds: ``steps`` items ``(done, timeout)`` per env; an episode
    start is zero-padded, as SB3's VecFrameStack pads it."""
    rng = np.random.default_rng(0)
    obs = np.zeros((n_envs, 6, 6, 4), np.uint8)
    obs[..., -1] = rng.integers(0, 9, (n_envs, 6, 6))
    for t, (done, timeout) in enumerate(steps):
        nxt = np.concatenate([obs[..., 1:], rng.integers(0, 9, (n_envs, 6, 6, 1))], -1)
        nxt = nxt.astype(np.uint8)
        infos = [{"TimeLimit.truncated": bool(timeout[e] and done[e])} for e in range(n_envs)]
        for buf in bufs:
            buf.add(obs, nxt, np.full((n_envs, 1), t % 3), np.full(n_envs, t / 4.0),
                    np.asarray(done[:n_envs], np.float32), infos)  # fmt: skip
        obs = nxt.copy()
        for e in range(n_envs):
            if done[e]:  # reset: zero padding and a fresh frame
                obs[e] = 0
                obs[e, ..., -1] = rng.integers(0, 9, (6, 6))


def assert_same(a, b):
    for field in FIELDS:
        x, y = getattr(a, field, None), getattr(b, field, None)
        assert (x is None) == (y is None), field
        if x is not None:
            assert th.equal(th.as_tensor(x), th.as_tensor(y)), field


flags = st.lists(st.sampled_from([False] * 5 + [True]), min_size=2, max_size=2)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.tuples(flags, flags), min_size=3, max_size=30),
    n_envs=st.integers(1, 2), size=st.sampled_from([8, 12]), n_step=st.integers(1, 3),
    prioritized=st.booleans(),
)  # fmt: skip
def test_memmap_buffer_samples_what_the_ram_buffer_samples(
    tmp_path_factory, steps, n_envs, size, n_step, prioritized
):
    """Episode ends, timeouts and wraparound, uniform and prioritized, n-step; and a
    pickle (save_replay_buffer) of the memmap buffer restores the same transitions."""
    tmp = tmp_path_factory.mktemp("sb3")
    cls = recollect.sb3.PrioritizedReplayBuffer if prioritized else recollect.sb3.ReplayBuffer
    disk, ram = pair(tmp, cls, size * n_envs, n_envs, n_step=n_step, gamma=0.9)
    play((disk, ram), n_envs, steps)
    assert disk.size() == ram.size() and disk.pos == ram.pos and disk.full == ram.full
    assert_same(disk.sample(16), ram.sample(16))
    if prioritized:
        s, r = disk.sample(4), ram.sample(4)
        assert np.array_equal(s.ids, r.ids)
        for buf in (disk, ram):
            buf.update_priorities(s.ids, np.arange(1.0, 5.0))
        assert_same(disk.sample(16), ram.sample(16))
    back = pickle.loads(pickle.dumps(disk))
    assert_same(back.sample(16), ram.sample(16))


def test_memmap_needs_a_new_directory(tmp_path):
    (tmp_path / "buf").mkdir()
    (tmp_path / "buf" / "other").write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="needs a new or empty directory"):
        buf = recollect.sb3.ReplayBuffer(
            8, SPACE, ACT, "cpu", frame_stack=4, storage="memmap", directory=tmp_path / "buf"
        )
        play([buf], 1, [([False], [False])])


def test_memmap_without_frame_stack_keeps_one_copy_per_observation_on_disk(tmp_path):
    disk, ram = (
        recollect.sb3.ReplayBuffer(16, SPACE, ACT, "cpu", rng=1, **kw)
        for kw in (
            {"storage": "memmap", "directory": tmp_path / "buf"},
            {"optimize_memory_usage": True},
        )
    )
    play((disk, ram), 1, [([t % 5 == 4], [False]) for t in range(20)])
    assert not disk.sb3_layout  # memmap: the one-copy layout
    assert_same(disk.sample(8), ram.sample(8))
    assert any((tmp_path / "buf").glob("leaf-*.npy"))
