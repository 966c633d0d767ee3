"""SB3's DQN trained from prioritized replay: importance-weighted loss, TD-error priorities."""

from __future__ import annotations

import functools
from typing import Any

import torch as th
from stable_baselines3 import DQN as Sb3DQN
from torch.nn import functional as F

from recollect.sb3.training import setup_model, train_prioritized

__all__ = ["DQN"]


def _td_losses(model: Any, replay_data: Any, discounts: Any) -> tuple[th.Tensor, th.Tensor]:
    """Per-sample Huber losses ``[B, 1]`` and ``|TD error|`` priorities ``[B, 1]``."""
    with th.no_grad():
        next_q_values, _ = model.q_net_target(replay_data.next_observations).max(dim=1)
        next_q_values = next_q_values.reshape(-1, 1)
        target_q_values = replay_data.rewards + (1 - replay_data.dones) * discounts * next_q_values
    current_q_values = model.q_net(replay_data.observations)
    current_q_values = th.gather(current_q_values, dim=1, index=replay_data.actions.long())
    per_sample = F.smooth_l1_loss(current_q_values, target_q_values, reduction="none")
    return per_sample, (target_q_values - current_q_values).abs()


class DQN(Sb3DQN):
    """``stable_baselines3.DQN`` whose ``train()`` uses prioritized replay (Schaul et al. 2016).

    Each gradient step weights the per-sample Huber loss by the sample's
    importance weights and sets the priorities of the sampled transitions to
    their ``|TD error|`` (measured before the update). Without
    ``replay_buffer_class`` the buffer is a :class:`recollect.sb3.PrioritizedReplayBuffer`
    (``replay_buffer_kwargs`` pass ``alpha``, ``beta``, ``epsilon``, ...) fed
    with the model's ``n_steps`` and ``gamma``. With a uniform buffer (SB3's or
    :class:`recollect.sb3.ReplayBuffer`) training is SB3's DQN.

    Example:
        >>> model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_kwargs=dict(alpha=0.6,
        ...     beta=recollect.LinearSchedule(0.4, 1.0, num_steps=50_000)))  # doctest: +SKIP
    """

    def _setup_model(self) -> None:
        setup_model(self, super()._setup_model)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's DQN update with importance weights and priority updates (see the class)."""
        self._update_learning_rate(self.policy.optimizer)
        losses = functools.partial(_td_losses, self)
        loss = train_prioritized(self, gradient_steps, batch_size, self._vec_normalize_env, losses)
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", loss)
