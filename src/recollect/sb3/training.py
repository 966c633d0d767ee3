"""Prioritized-replay pieces shared by the SB3 algorithm subclasses (DQN, QR-DQN)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch as th

from recollect.sb3.prioritized import PrioritizedReplayBuffer

__all__ = [
    "report_priorities",
    "setup_model",
    "train_prioritized",
    "use_prioritized_buffer",
    "weighted_mean",
]

#: ``(replay_data, discounts) -> (per-sample loss [B] or [B, 1], new priorities [B])``
StepLoss = Callable[[Any, Any], tuple[th.Tensor, th.Tensor]]


def weighted_mean(per_sample: th.Tensor, replay_data: Any) -> th.Tensor:
    """Mean of per-sample losses ``[B]`` or ``[B, 1]``, weighted by importance weights if any.

    With SB3's own sample tuples (no ``weights``) this is the plain mean, so
    the loss equals SB3's.
    """
    weights = getattr(replay_data, "weights", None)
    if weights is None:
        return per_sample.mean()
    return (per_sample.reshape(-1) * weights.reshape(-1)).mean()


def report_priorities(replay_buffer: Any, replay_data: Any, priorities: th.Tensor) -> None:
    """Sends ``priorities`` ``[B]`` of a prioritized sample back to its buffer (else no-op)."""
    ids = getattr(replay_data, "ids", None)
    if ids is not None:
        replay_buffer.update_priorities(ids, priorities.detach().reshape(-1))


def use_prioritized_buffer(model: Any) -> bool:
    """Makes :class:`PrioritizedReplayBuffer` the model's default buffer class.

    When the model has no ``replay_buffer_class``, sets it and passes the
    model's ``n_steps`` and ``gamma`` as ``n_step``/``gamma``. Returns whether
    it did (the model's ``n_steps`` are then handled by the buffer).
    """
    if model.replay_buffer_class is not None:
        return False
    model.replay_buffer_class = PrioritizedReplayBuffer
    model.replay_buffer_kwargs = {
        "n_step": model.n_steps,
        "gamma": model.gamma,
        **model.replay_buffer_kwargs,
    }
    return True


def setup_model(model: Any, setup: Callable[[], None]) -> None:
    """Runs the SB3 model's own ``setup`` (its ``_setup_model``) so that it builds a
    prioritized buffer with the model's n-step.

    SB3 warns that ``n_steps`` is ignored by a custom buffer; the buffer gets it
    through ``replay_buffer_kwargs`` instead (:func:`use_prioritized_buffer`), so the
    model shows ``n_steps=1`` while ``setup`` builds its buffer, and its own after.
    """
    if not use_prioritized_buffer(model):
        setup()
        return
    n_steps, model.n_steps = model.n_steps, 1
    try:
        setup()
    finally:
        model.n_steps = n_steps


def train_prioritized(
    model: Any, gradient_steps: int, batch_size: int, env: Any, step_loss: StepLoss
) -> float:
    """The gradient steps of a prioritized algorithm's ``train()`` (DQN, QR-DQN); returns
    the mean loss. Per step: sample ``batch_size`` transitions (normalized by ``env``, the
    model's ``VecNormalize`` or None), take the importance-weighted mean of
    ``step_loss(replay_data, discounts)``'s per-sample losses (:func:`weighted_mean`),
    report its priorities (:func:`report_priorities`), clip gradients to the model's
    ``max_grad_norm`` (when set) and step the optimizer.

    ``discounts`` are the sample's n-step discounts (float ``[B, 1]``) or the model's
    ``gamma`` when the buffer gives none; ``step_loss`` computes its targets under
    ``torch.no_grad()``. The caller updates the learning rate first and logs after
    (SB3's private members, read on the model itself).
    """
    model.policy.set_training_mode(True)
    losses = []
    buffer = model.replay_buffer
    assert buffer is not None, "train() before _setup_model()"
    for _ in range(gradient_steps):
        replay_data = buffer.sample(batch_size, env=env)
        discounts = replay_data.discounts if replay_data.discounts is not None else model.gamma
        per_sample, priorities = step_loss(replay_data, discounts)
        loss = weighted_mean(per_sample, replay_data)
        losses.append(loss.item())
        report_priorities(buffer, replay_data, priorities)
        model.policy.optimizer.zero_grad()
        loss.backward()
        if model.max_grad_norm is not None:
            th.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
        model.policy.optimizer.step()
    return float(np.mean(losses))
