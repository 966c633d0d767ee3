"""SB3's DQN trained from prioritized replay: importance-weighted loss, TD-error priorities."""

from __future__ import annotations

import numpy as np
import torch as th
from stable_baselines3 import DQN as Sb3DQN
from torch.nn import functional as F

from recollect.sb3.training import report_priorities, setup_model, weighted_mean

__all__ = ["DQN"]


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
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses = []
        buffer = self.replay_buffer
        assert buffer is not None, "train() before _setup_model()"
        for _ in range(gradient_steps):
            replay_data = buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma
            with th.no_grad():
                next_q_values, _ = self.q_net_target(replay_data.next_observations).max(dim=1)
                next_q_values = next_q_values.reshape(-1, 1)
                target_q_values = (
                    replay_data.rewards + (1 - replay_data.dones) * discounts * next_q_values
                )
            current_q_values = self.q_net(replay_data.observations)
            current_q_values = th.gather(current_q_values, dim=1, index=replay_data.actions.long())
            per_sample = F.smooth_l1_loss(current_q_values, target_q_values, reduction="none")
            loss = weighted_mean(per_sample, replay_data)
            losses.append(loss.item())
            report_priorities(buffer, replay_data, (target_q_values - current_q_values).abs())
            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
