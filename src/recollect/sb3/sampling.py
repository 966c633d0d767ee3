"""SB3's ``_get_samples`` over :class:`~recollect.sb3.arrays.Sb3Arrays`: one-step and n-step.

The arithmetic is SB3's (``stable_baselines3.common.buffers.ReplayBuffer`` and
the n-step ``_get_samples`` of ``NStepReplayBuffer``, SB3 2.9): dones are ``done * (1 - timeout)``;
an n-step sample sums ``gamma^k r_k`` up to and including the first done or
timeout within ``n_steps`` transitions, bootstraps from the ``next_obs`` of that
last transition with ``discounts = gamma^(k+1)``, and treats the newest stored
step of each env as a timeout unless it is done (its successor is not stored).
Every gather is one ``take`` of the flattened storage (index
:meth:`~recollect.sb3.arrays.Sb3Arrays.flat_index` of ``(env, pos)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.sb3.arrays import Sb3Arrays

__all__ = ["gather_fields"]


def _take(source: Any, index: np.ndarray) -> Any:
    if isinstance(source, dict):
        return {key: value.take(index, axis=0) for key, value in source.items()}
    return source.take(index, axis=0)


def _normalize_obs(obs: Any, env: Any) -> Any:
    return obs if env is None else env.normalize_obs(obs)


def gather_fields(
    arrays: Sb3Arrays,
    batch_inds: np.ndarray,
    env_indices: np.ndarray,
    env: Any,
    n_steps: int,
    gamma: float,
    pos: int,
) -> tuple[Any, ...]:
    """``(obs, actions, next_obs, dones, rewards, discounts)`` numpy fields of SB3's samples.

    Args:
        arrays: the stored arrays.
        batch_inds, env_indices: int ``[B]`` SB3 coordinates (``pos``, env).
        env: SB3's ``VecNormalize`` or None.
        n_steps: 1 (SB3's ``ReplayBuffer``) or more (``NStepReplayBuffer``).
        gamma: discount of n-step returns.
        pos: SB3's ``pos`` (the slot of the next write).

    Returns:
        Observations ``[B, *obs_shape]`` (dicts for Dict spaces), actions
        ``[B, action_dim]``, float32 dones and rewards ``[B, 1]``, and float32
        discounts ``[B, 1]`` (None when ``n_steps == 1``).
    """
    size = arrays.buffer_size
    index = arrays.flat_index(env_indices, batch_inds)
    obs = _normalize_obs(_take(arrays.flat("observations"), index), env)
    actions = arrays.flat("actions").take(index, axis=0)
    dones_flat, timeouts_flat = arrays.flat("dones"), arrays.flat("timeouts")
    rewards_flat = arrays.flat("rewards")
    if n_steps == 1:
        next_obs = _normalize_obs(_take(arrays.flat("next_observations"), index), env)
        dones = dones_flat.take(index) * (1 - timeouts_flat.take(index))
        rewards = rewards_flat.take(index).reshape(-1, 1)
        if env is not None:
            rewards = env.normalize_reward(rewards).astype(np.float32)
        return obs, actions, next_obs, dones.reshape(-1, 1), rewards, None
    steps = np.arange(n_steps)
    slots = (batch_inds[:, None] + steps) % size  # [B, n]
    seq = arrays.flat_index(env_indices[:, None], slots)
    rewards_seq = rewards_flat.take(seq)
    if env is not None:
        rewards_seq = env.normalize_reward(rewards_seq).astype(np.float32)
    dones_seq = dones_flat.take(seq)
    cut = np.logical_or(dones_seq, timeouts_flat.take(seq))
    cut |= (slots == (pos - 1) % size) & ~dones_seq.astype(bool)  # the newest step: a cut
    done_idx = np.where(cut.any(axis=1), cut.argmax(axis=1), n_steps - 1)
    mask = steps <= done_idx[:, None]
    discounts = gamma ** mask.sum(axis=1, keepdims=True).astype(np.float32)
    weights = gamma ** np.arange(n_steps, dtype=np.float32)
    returns = (rewards_seq * weights * mask).sum(axis=1, keepdims=True)
    last = arrays.flat_index(env_indices, (batch_inds + done_idx) % size)
    next_obs = _normalize_obs(_take(arrays.flat("next_observations"), last), env)
    final = dones_flat.take(last)[:, None].astype(np.float32)
    final *= 1.0 - timeouts_flat.take(last)[:, None].astype(np.float32)
    return obs, actions, next_obs, final, returns, discounts
