"""A recollect.sb3 checkpoint written before SB3's array layout existed (one copy of each
observation in a TransitionBuffer, no ``layout`` field) still loads, in that layout.

``tests/golden/sb3_v1`` was written by recollect at 2502e65: ``ReplayBuffer(16, Box(3),
Discrete(4), n_envs=2, rng=0)`` after 11 adds of step t: observation t, next observation
t + 1, action (t % 4, (t + 1) % 4), reward (t, -t), done only for env 0 at t = 5.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("stable_baselines3")

from recollect.sb3 import ReplayBuffer  # noqa: E402

GOLDEN = Path(__file__).parents[1] / "golden" / "sb3_v1"
OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(4)


def test_checkpoint_without_layout_loads_in_the_one_copy_layout(tmp_path):
    path = tmp_path / "sb3"
    shutil.copytree(GOLDEN, path)
    rb = ReplayBuffer.load_checkpoint(path, OBS, ACT, "cpu")
    assert (rb.pos, rb.full, rb.size()) == (3, True, 8)
    assert not rb.sb3_layout
    slots = np.arange(8)
    times = np.where(slots < 3, slots + 8, slots)  # slot i holds the newest t with t % 8 == i
    for env in (0, 1):
        np.random.seed(env)  # noqa: NPY002  (SB3 draws env indices from numpy's global RNG)
        env_inds = np.random.randint(0, 2, size=8)  # noqa: NPY002
        np.random.seed(env)  # noqa: NPY002
        batch = rb._get_samples(slots)
        obs = batch.observations.numpy()[:, 0]
        np.testing.assert_array_equal(obs, times)
        np.testing.assert_array_equal(batch.next_observations.numpy()[:, 0], times + 1)
        expected_rewards = np.where(env_inds == 0, times, -times)
        np.testing.assert_array_equal(batch.rewards.numpy()[:, 0], expected_rewards)
    # it keeps working: adds continue the ring, and a new save loads again
    o = np.full((2, 3), 11, np.float32)
    rb.add(o, o + 1, np.array([3, 0]), np.array([11, -11], np.float32), np.zeros(2, bool), [{}, {}])
    assert rb.pos == 4
    rb.save_checkpoint(tmp_path / "again")
    again = ReplayBuffer.load_checkpoint(tmp_path / "again", OBS, ACT, "cpu")
    assert (again.pos, again.sb3_layout) == (4, False)
