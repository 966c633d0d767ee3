"""sb3-contrib's QR-DQN trained from prioritized replay (needs ``sb3-contrib``)."""

from __future__ import annotations

import functools
from typing import Any

import torch as th
from sb3_contrib import QRDQN as ContribQRDQN

from recollect.sb3.training import setup_model, train_prioritized

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


def _quantile_losses(model: Any, replay_data: Any, discounts: Any) -> tuple[th.Tensor, th.Tensor]:
    """Per-sample quantile Huber losses ``[B]``, which are also the new priorities."""
    batch_size = replay_data.rewards.shape[0]  # observations may be a dict
    with th.no_grad():
        next_quantiles = model.quantile_net_target(replay_data.next_observations)
        greedy = next_quantiles.mean(dim=1, keepdim=True).argmax(dim=2, keepdim=True)
        greedy = greedy.expand(batch_size, model.n_quantiles, 1)
        next_quantiles = next_quantiles.gather(dim=2, index=greedy).squeeze(dim=2)
        target = replay_data.rewards + (1 - replay_data.dones) * discounts * next_quantiles
    current = model.quantile_net(replay_data.observations)
    actions = replay_data.actions[..., None].long().expand(batch_size, model.n_quantiles, 1)
    current = th.gather(current, dim=2, index=actions).squeeze(dim=2)
    per_sample = quantile_huber_per_sample(current, target)
    return per_sample, per_sample


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
        self._update_learning_rate(self.policy.optimizer)
        losses = functools.partial(_quantile_losses, self)
        loss = train_prioritized(self, gradient_steps, batch_size, self._vec_normalize_env, losses)
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", loss)
