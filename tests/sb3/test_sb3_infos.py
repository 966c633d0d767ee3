"""``infos`` in every form SB3 takes and gymnasium produces, read only as SB3 reads them.

SB3's ``add`` reads ``infos[i]["TimeLimit.truncated"]`` only with
``handle_timeout_termination=True``; gymnasium 1.x vector envs return one dict
of arrays (with ``_key`` masks), often ``{}``. Includes CleanRL's DQN loop on a
gymnasium 1.x vector env with the env's own infos, side by side with SB3's buffer.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
from stable_baselines3.common.buffers import ReplayBuffer as Sb3ReplayBuffer

import recollect.sb3
from recollect.errors import InvalidArgumentError

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def buffers(n_envs: int, **kwargs) -> tuple:
    sb3 = Sb3ReplayBuffer(16, OBS, ACT, "cpu", n_envs, **kwargs)
    ours = recollect.sb3.ReplayBuffer(16, OBS, ACT, "cpu", n_envs, rng=0, **kwargs)
    return sb3, ours


def add(buf, n_envs: int, infos, done=None) -> None:
    obs = np.full((n_envs, 3), buf.pos, np.float32)
    done = np.ones(n_envs, bool) if done is None else done
    buf.add(obs, obs + 1, np.zeros(n_envs, np.int64), np.ones(n_envs, np.float32), done, infos)


def test_list_of_dicts_gives_sb3s_timeouts_and_dones():
    sb3, ours = buffers(3)
    for infos in ([{}, {"TimeLimit.truncated": True}, {}], [{"TimeLimit.truncated": False}] * 3):
        add(sb3, 3, infos)
        add(ours, 3, infos)
    np.testing.assert_array_equal(ours.timeouts, sb3.timeouts)
    assert ours.timeouts[0].tolist() == [0.0, 1.0, 0.0]
    dones = ours.sample(300).dones.numpy().ravel()
    assert set(dones.tolist()) == {0.0, 1.0}  # the timeout is not a done, the others are


def test_gymnasium_dict_of_arrays_uses_the_mask():
    _, ours = buffers(3)
    infos = {
        "TimeLimit.truncated": np.array([True, True, False]),
        "_TimeLimit.truncated": np.array([True, False, True]),  # env 1 did not report it
        "episode": {"r": np.zeros(3)},
        "_episode": np.array([False, True, False]),
    }
    add(ours, 3, infos)
    assert ours.timeouts[0].tolist() == [1.0, 0.0, 0.0]
    add(ours, 3, {"TimeLimit.truncated": np.array([False, False, True])})  # no mask: all set
    assert ours.timeouts[1].tolist() == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("empty", [{}, [], ()])
def test_empty_infos_mean_no_timeouts(empty):
    sb3, ours = buffers(2)
    add(ours, 2, empty)
    add(sb3, 2, [{}, {}])
    np.testing.assert_array_equal(ours.timeouts, sb3.timeouts)
    np.testing.assert_array_equal(ours.dones, sb3.dones)


def test_infos_are_not_read_without_handle_timeout_termination():
    sb3, ours = buffers(2, handle_timeout_termination=False)
    for infos in ([{"TimeLimit.truncated": True}] * 2, [{}] * 5, "anything"):
        add(sb3, 2, infos)
        add(ours, 2, infos)
    np.testing.assert_array_equal(ours.timeouts, sb3.timeouts)  # all zero, as SB3's
    assert not ours.timeouts.any()


def test_infos_that_cannot_be_read_raise_and_write_nothing():
    _, ours = buffers(2)
    with pytest.raises(InvalidArgumentError, match="must hold n_envs=2 dicts"):
        add(ours, 2, [{}])
    with pytest.raises(InvalidArgumentError, match="got str"):
        add(ours, 2, "infos")
    with pytest.raises(InvalidArgumentError, match="one value per env"):
        add(ours, 2, {"TimeLimit.truncated": np.zeros(3, bool)})
    assert ours.size() == 0 and ours.transitions.num_frames() == 0


def test_cleanrl_loop_on_a_gymnasium_vector_env_matches_sb3s_buffer():
    """CleanRL's dqn.py loop (gymnasium 1.x, SB3's buffer API): 2,000 steps, infos as given."""
    assert gym.__version__.split(".")[0] >= "1"

    def make() -> gym.Env:
        return gym.make("CartPole-v1", max_episode_steps=60)

    envs = gym.wrappers.vector.RecordEpisodeStatistics(gym.vector.SyncVectorEnv([make]))
    kwargs = {"handle_timeout_termination": False}  # as CleanRL
    space, act = envs.single_observation_space, envs.single_action_space
    sb3 = Sb3ReplayBuffer(500, space, act, "cpu", **kwargs)
    ours = recollect.sb3.ReplayBuffer(500, space, act, "cpu", rng=0, **kwargs)
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    episodes = 0
    for step in range(2_000):
        actions = envs.action_space.sample()
        next_obs, rewards, terminations, _truncations, infos = envs.step(actions)
        episodes += int(np.sum(infos.get("_episode", 0)))
        real_next_obs = next_obs.copy()
        for buf in (sb3, ours):
            buf.add(obs, real_next_obs, actions, rewards, terminations, infos)
        obs = next_obs
        if step >= 128:
            data = ours.sample(128)
            assert data.observations.shape == (128, 4) and data.actions.shape == (128, 1)
    assert episodes > 20  # infos carried episode statistics all along
    for name in ("observations", "next_observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(sb3, name), err_msg=name)
    assert (ours.pos, ours.full) == (sb3.pos, sb3.full)
