"""sb3-contrib's QR-DQN trained from prioritized replay (needs ``sb3-contrib``)."""

from __future__ import annotations

import numpy as np
import torch as th
from sb3_contrib import QRDQN as ContribQRDQN

from recollect.sb3.training import report_priorities, setup_model, weighted_mean

__all__ = ["QRDQN", "quantile_huber_per_sample"]


def quantile_huber_per_sample(current: th.Tensor, target: th.Tensor) -> th.Tensor:
    """QR-DQN's quantile Huber loss per sample, float ``[B]``.

    ``current`` ``[B, n_quantiles]``, ``target`` ``[B, n_target_quantiles]``. Its
    mean over the batch equals ``sb3_contrib.common.utils.quantile_huber_loss``
    with ``sum_over_quantiles=True``.
    """
    n = current.shape[-1]
    cum_prob = (th.arange(n, device=current.device, dtype=th.float) + 0.5) / n
    delta = target.unsqueeze(-2) - current.unsqueeze(-1)  # [B, n, n_target]
    abs_delta = delta.abs()
    huber = th.where(abs_delta > 1, abs_delta - 0.5, delta**2 * 0.5)
    loss = (cum_prob.view(1, -1, 1) - (delta.detach() < 0).float()).abs() * huber
    return loss.sum(dim=-2).mean(dim=-1)


class QRDQN(ContribQRDQN):
    """``sb3_contrib.QRDQN`` with prioritized replay (as :class:`recollect.sb3.DQN`).

    The loss is the importance-weighted mean of the per-sample quantile Huber
    losses; each sampled transition's new priority is its own quantile Huber
    loss (the distributional analogue of ``|TD error|``, as Rainbow uses its
    distributional loss). Without ``replay_buffer_class`` the buffer is a
    :class:`recollect.sb3.PrioritizedReplayBuffer`.
    """

    def _setup_model(self) -> None:
        setup_model(self, super()._setup_model)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """sb3-contrib's QR-DQN update with importance weights and priority updates."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses = []
        buffer = self.replay_buffer
        assert buffer is not None, "train() before _setup_model()"
        for _ in range(gradient_steps):
            replay_data = buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma
            with th.no_grad():
                next_quantiles = self.quantile_net_target(replay_data.next_observations)
                greedy = next_quantiles.mean(dim=1, keepdim=True).argmax(dim=2, keepdim=True)
                greedy = greedy.expand(batch_size, self.n_quantiles, 1)
                next_quantiles = next_quantiles.gather(dim=2, index=greedy).squeeze(dim=2)
                target = replay_data.rewards + (1 - replay_data.dones) * discounts * next_quantiles
            current = self.quantile_net(replay_data.observations)
            actions = replay_data.actions[..., None].long().expand(batch_size, self.n_quantiles, 1)
            current = th.gather(current, dim=2, index=actions).squeeze(dim=2)
            per_sample = quantile_huber_per_sample(current, target)
            loss = weighted_mean(per_sample, replay_data)
            losses.append(loss.item())
            report_priorities(buffer, replay_data, per_sample)
            self.policy.optimizer.zero_grad()
            loss.backward()
            if self.max_grad_norm is not None:
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
