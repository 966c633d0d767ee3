"""recollect.drivers.VectorEnvDriver on a real gymnasium vector env (issue #14, item 20)."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.collect.drivers import VectorEnvDriver
from recollect.errors import InvalidArgumentError

gym = pytest.importorskip("gymnasium")

SPEC = {
    "observation": rc.ArraySpec((4,), np.float32),
    "action": rc.ArraySpec((), np.int64),
    "reward": rc.ArraySpec((), np.float32),
    "discount": rc.ArraySpec((), np.float32),
    "is_first": rc.ArraySpec((), np.bool_),
    "is_last": rc.ArraySpec((), np.bool_),
    "is_terminal": rc.ArraySpec((), np.bool_),
}


class Recorder:
    """Wraps the vector env's step to record what it returned."""

    def __init__(self, env):
        self.env, self.returned = env, []

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        out = self.env.step(actions)
        self.returned.append(tuple(np.copy(x) for x in out[:4]))
        return out


def test_next_step_autoreset_maps_to_rlds_steps():
    # CartPole with a 20-step time limit: both terminations and truncations happen.
    env = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync", max_episode_steps=20)
    recorder = Recorder(env)
    buffer = rc.ReplayBuffer(SPEC, 3 * 200, num_envs=3, rng=0)
    driver = VectorEnvDriver(recorder, [buffer.add_batch], seed=0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        driver.step(rng.integers(0, 2, 3))
    env.close()
    d = buffer.gather_all()  # leaves [3, 200]
    obs, reward, terminated, truncated = (
        np.stack(x, axis=1) for x in zip(*recorder.returned, strict=True)
    )
    done = terminated | truncated
    assert terminated.any() and truncated.any()
    first, last, terminal = d["is_first"], d["is_last"], d["is_terminal"]
    assert first[:, 0].all() and not last[:, 0].any()
    np.testing.assert_array_equal(last[:, 1:], done[:, :-1])  # the step after a done call
    np.testing.assert_array_equal(terminal[:, 1:], terminated[:, :-1])
    np.testing.assert_array_equal(first[:, 1:], last[:, :-1])  # then a new episode
    # the final step holds the observation the done call returned, with reward 0
    np.testing.assert_array_equal(d["observation"][:, 1:][done[:, :-1]], obs[:, :-1][done[:, :-1]])
    assert (d["reward"][last] == 0).all()
    np.testing.assert_array_equal(d["reward"], reward.astype(np.float32))  # r_t follows a_t
    np.testing.assert_array_equal(d["discount"], (~terminated).astype(np.float32))
    # a window of 2 steps never pairs a final observation with the next episode's first
    s = buffer.sample(512, num_steps=2)
    assert not s.data["is_last"][:, 0].any() and not s.data["is_first"][:, 1].any()


def test_other_autoreset_modes_are_refused():
    env = gym.make_vec(
        "CartPole-v1",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    with pytest.raises(
        InvalidArgumentError, match=r"NEXT_STEP mode .*got autoreset_mode=SAME_STEP"
    ):
        VectorEnvDriver(env, [])
    env.close()
