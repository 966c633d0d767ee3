"""What the SB3 buffers return: SB3's sample tuples as torch tensors, plus PER fields.

``ReplayBuffer.sample`` returns SB3's own ``ReplayBufferSamples`` (or
``DictReplayBufferSamples``); ``PrioritizedReplayBuffer.sample`` returns
:class:`PrioritizedReplayBufferSamples`, the same fields in the same order
followed by ``weights`` and ``ids``, so SB3 algorithms that read the fields by
name train from it unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np
import torch as th
from stable_baselines3.common.type_aliases import DictReplayBufferSamples, ReplayBufferSamples

from recollect.buffers import TransitionSample

__all__ = [
    "PrioritizedReplayBufferSamples",
    "Sb3Draw",
    "pack",
    "sample_weights",
    "to_samples",
]


class PrioritizedReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields, then the prioritized-replay metadata.

    Attributes:
        observations, next_observations: tensors ``[B, *obs_shape]`` (dicts of
            them for Dict spaces), on the buffer's device.
        actions: ``[B, action_dim]``; dones, rewards: float32 ``[B, 1]``.
        discounts: float32 ``[B, 1]`` ``gamma^k`` of n-step samples, else None.
        weights: float32 ``[B, 1]`` importance weights ``(N * P(i))^-beta``
            normalised by their max.
        ids: int64 numpy ``[B]``; pass them back to ``update_priorities``.
    """

    observations: Any
    actions: th.Tensor
    next_observations: Any
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor
    ids: np.ndarray


@dataclasses.dataclass(frozen=True)
class Sb3Draw:
    """A sample and its metadata (``ReplayBuffer.draw``).

    Attributes:
        samples: what ``sample`` returns.
        ids: int64 ``[B]`` recollect item ids (see ``ReplayBuffer.locate``).
        probabilities: float64 ``[B]`` probability of each drawn transition.
        weights: float64 ``[B]`` importance weights (prioritized), else None.
    """

    samples: Any
    ids: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None


def _tensor(x: Any, device: th.device) -> Any:
    if isinstance(x, dict):
        return {key: th.as_tensor(value, device=device) for key, value in x.items()}
    return th.as_tensor(x, device=device)


def to_samples(
    s: TransitionSample, env: Any, device: th.device, prioritized: bool, n_step: bool
) -> Any:
    """SB3 samples of a recollect :class:`~recollect.TransitionSample`.

    Applies ``VecNormalize`` as SB3's buffers do: ``env.normalize_obs`` on both
    observations and ``env.normalize_reward`` on the (n-step) reward. Dones are
    real terminations only (SB3: ``done * (1 - timeout)``).
    """
    obs, next_obs = s.observation, s.next_observation
    reward = np.asarray(s.reward, np.float32).reshape(-1, 1)
    if env is not None:
        obs, next_obs = env.normalize_obs(obs), env.normalize_obs(next_obs)
        reward = env.normalize_reward(reward).astype(np.float32)
    discounts = None
    if n_step:
        discounts = _tensor(np.asarray(s.discount, np.float32).reshape(-1, 1), device)
    fields = (
        _tensor(obs, device),
        _tensor(s.action, device),
        _tensor(next_obs, device),
        _tensor(s.terminated.astype(np.float32).reshape(-1, 1), device),
        _tensor(reward, device),
        discounts,
    )
    if prioritized:
        weights = _tensor(np.asarray(s.weights, np.float32).reshape(-1, 1), device)
        return PrioritizedReplayBufferSamples(*fields, weights=weights, ids=s.ids)
    if isinstance(obs, dict):
        return DictReplayBufferSamples(*fields)
    return ReplayBufferSamples(*fields)


def pack(
    fields: tuple[Any, ...],
    device: th.device,
    weights: np.ndarray | None = None,
    ids: np.ndarray | None = None,
) -> Any:
    """SB3's sample tuple of numpy ``fields`` ``(obs, actions, next_obs, dones, rewards,
    discounts)`` (see :func:`recollect.sb3.sampling.gather_fields`), as tensors on ``device``.

    The fields are fresh arrays, so the tensors share their memory on the CPU
    (SB3 copies once more). With ``weights`` (float ``[B]``): a
    :class:`PrioritizedReplayBufferSamples` carrying them and ``ids``.
    """
    obs, actions, next_obs, dones, rewards, discounts = fields
    tensors = (
        _tensor(obs, device),
        th.as_tensor(actions, device=device),
        _tensor(next_obs, device),
        th.as_tensor(dones, device=device),
        th.as_tensor(rewards, device=device),
        None if discounts is None else th.as_tensor(discounts, device=device),
    )
    if weights is not None:
        assert ids is not None, "prioritized samples carry their ids"
        w = th.as_tensor(np.asarray(weights, np.float32).reshape(-1, 1), device=device)
        return PrioritizedReplayBufferSamples(*tensors, weights=w, ids=ids)
    if isinstance(obs, dict):
        return DictReplayBufferSamples(*tensors)
    return ReplayBufferSamples(*tensors)


def sample_weights(replay_data: Any) -> th.Tensor | None:
    """``replay_data.weights`` (``[B, 1]``) of prioritized samples, None for SB3's own tuples."""
    return getattr(replay_data, "weights", None)
