"""SB3 algorithms training from recollect.sb3 buffers (short smoke runs; slow ones elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import torch as th
from stable_baselines3 import SAC
from stable_baselines3.common.buffers import ReplayBuffer as Sb3ReplayBuffer

import recollect
import recollect.sb3
from recollect.sb3.qrdqn import quantile_huber_per_sample


def small() -> dict:
    """Fresh policy_kwargs (SB3 adds keys to the dict it gets)."""
    return {"net_arch": [32, 32]}


@pytest.mark.slow  # about 8 s of SAC training: runs with CI=true / --run-slow
def test_sac_on_pendulum_runs_2k_steps_with_the_recollect_buffer():
    model = SAC(
        "MlpPolicy",
        "Pendulum-v1",
        buffer_size=5_000,
        learning_starts=200,
        batch_size=64,
        replay_buffer_class=recollect.sb3.ReplayBuffer,
        policy_kwargs=small(),
        seed=0,
        device="cpu",
    )
    model.learn(2_000)
    buf = model.replay_buffer
    assert isinstance(buf, recollect.sb3.ReplayBuffer) and buf.size() == 2_000
    s = buf.sample(8)
    assert s.actions.shape == (8, 1) and s.actions.dtype == th.float32
    assert model.logger.name_to_value["train/critic_loss"] != 0


def test_dqn_defaults_to_prioritized_replay_and_updates_priorities():
    model = recollect.sb3.DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=100,
        buffer_size=1_000,
        train_freq=4,
        n_steps=3,
        replay_buffer_kwargs={"alpha": 0.7, "beta": recollect.LinearSchedule(0.4, 1.0, 500)},
        policy_kwargs=small(),
        seed=0,
        device="cpu",
    )
    buf = model.replay_buffer
    assert isinstance(buf, recollect.sb3.PrioritizedReplayBuffer)
    assert (buf.alpha, buf.n_step, buf.gamma) == (0.7, 3, model.gamma)
    model.learn(600)
    assert buf.current_beta() == 1.0
    probs = buf.draw(512).probabilities
    assert probs.std() > 0  # priorities were updated from TD errors
    assert model.logger.name_to_value["train/n_updates"] > 0


def test_dqn_with_a_uniform_buffer_trains_as_sb3_dqn():
    model = recollect.sb3.DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=50,
        buffer_size=500,
        replay_buffer_class=Sb3ReplayBuffer,
        policy_kwargs=small(),
        seed=0,
        device="cpu",
    )
    model.learn(200)
    assert type(model.replay_buffer) is Sb3ReplayBuffer


def test_qrdqn_from_sb3_contrib_trains_with_prioritized_replay():
    pytest.importorskip("sb3_contrib")
    model = recollect.sb3.QRDQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=100,
        buffer_size=1_000,
        train_freq=4,
        policy_kwargs={"net_arch": [32], "n_quantiles": 8},
        seed=0,
        device="cpu",
    )
    assert isinstance(model.replay_buffer, recollect.sb3.PrioritizedReplayBuffer)
    model.learn(500)
    assert model.replay_buffer.draw(512).probabilities.std() > 0


def test_per_sample_quantile_loss_averages_to_sb3_contrib_loss():
    pytest.importorskip("sb3_contrib")
    from sb3_contrib.common.utils import quantile_huber_loss

    gen = th.Generator().manual_seed(0)
    current, target = th.randn(16, 8, generator=gen), 3 * th.randn(16, 8, generator=gen)
    ours = quantile_huber_per_sample(current, target)
    assert ours.shape == (16,)
    expected = quantile_huber_loss(current, target, sum_over_quantiles=True)
    assert th.allclose(ours.mean(), expected)


def test_weighted_loss_with_unit_weights_equals_the_plain_mean():
    from recollect.sb3.training import weighted_mean

    per_sample = th.from_numpy(np.linspace(0, 1, 8, dtype=np.float32)).reshape(-1, 1)

    class Data:
        weights = th.ones(8, 1)

    assert th.allclose(weighted_mean(per_sample, Data()), per_sample.mean())
    assert weighted_mean(per_sample, object()) == per_sample.mean()
