"""n-step returns: discounted sums of up to ``n`` rewards, cut at the episode end.

For a transition starting at step ``s`` the n-step target is::

    R = sum_{j < k} discount^j * r_{s + j}
    target = R + discount^k * (1 - terminated) * V(next_observation)

where ``k <= n`` is the number of rewards actually summed: ``n``, or fewer when
the episode ends first. ``terminated`` is true only for a real termination
(``is_terminal`` in RLDS, ``terminated`` in gymnasium), never for a truncation
(time limit): after a truncation the learner still bootstraps, from the
observation where the episode was cut, with ``discount^k``.

Two sources:

* :func:`n_step_returns` / :func:`n_step_transitions` work on windows of
  ``n + 1`` steps sampled from a :class:`~recollect.ReplayBuffer` in the RLDS
  layout (step ``j`` holds ``observation_j``, the ``action_j`` taken there and
  the ``reward_j`` that followed; the ``is_last`` step holds the final
  observation). Sample with ``within_episode=False`` so that windows reaching
  past an episode end are drawn too; the helper cuts them at the first
  ``is_last``.
* ``TransitionBuffer.sample(batch_size, n_step=n, discount=gamma)`` (see
  :func:`recollect.buffers.nstep_transitions.n_step_fields`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, ShapeError

__all__ = ["NStepReturns", "n_step_returns", "n_step_transitions"]


@dataclasses.dataclass(frozen=True)
class NStepReturns:
    """n-step returns of a batch of windows.

    Attributes:
        reward: ``[B, *reward_shape]`` discounted sum of the ``k`` rewards
            (dtype ``result_type(reward dtype, float32)``).
        discount: ``[B]`` bootstrap discount ``discount^k`` (same dtype).
        terminated: bool ``[B]`` the episode really terminated within the window.
        num_steps: int64 ``[B]`` ``k``, rewards summed; also the window index of
            the step whose observation to bootstrap from.
    """

    reward: np.ndarray
    discount: np.ndarray
    terminated: np.ndarray
    num_steps: np.ndarray


def check_discount(discount: Any) -> float:
    """Validates a discount factor ``gamma`` in ``[0, 1]``."""
    try:
        gamma = float(discount)
    except (TypeError, ValueError):
        gamma = float("nan")
    if not 0.0 <= gamma <= 1.0:
        raise InvalidArgumentError(
            f"`discount` must be a float in [0, 1]; got discount={discount!r}."
        )
    return gamma


def discounted_sum(
    reward: np.ndarray, k: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """``sum_{j < k} gamma^j reward[:, j]`` and ``gamma^k`` for reward ``[B, n, *shape]``."""
    n = reward.shape[1]
    out_dtype = np.result_type(reward.dtype, np.float32)
    powers = gamma ** np.arange(n, dtype=np.float64)
    used = (np.arange(n) < k[:, None]).reshape(k.shape + (n,) + (1,) * (reward.ndim - 2))
    scale = powers.reshape((n,) + (1,) * (reward.ndim - 2))
    total = np.where(used, reward.astype(np.float64) * scale, 0.0).sum(axis=1)  # unused may be nan
    return total.astype(out_dtype), (gamma ** k.astype(np.float64)).astype(out_dtype)


def n_step_returns(reward: Any, is_last: Any, is_terminal: Any, discount: float) -> NStepReturns:
    """n-step returns of RLDS windows of ``n + 1`` steps (``n = T - 1``).

    ``k`` is the index of the first ``is_last`` step of the window, or ``n``
    when there is none: the rewards ``0 .. k-1`` are summed and the bootstrap
    observation is that of step ``k``. ``terminated = is_terminal[k]`` where
    step ``k`` is an ``is_last`` step. A window that starts on an ``is_last``
    step gives ``k = 0`` (reward 0, discount 1): nothing to learn from it.

    Args:
        reward: ``[B, T, *reward_shape]`` rewards (``reward_j`` follows ``action_j``).
        is_last: bool ``[B, T]`` episode ends (the step holds the final observation).
        is_terminal: bool ``[B, T]`` real terminations (``is_last`` and not a time limit).
        discount: ``gamma`` in ``[0, 1]``.

    Raises:
        ShapeError: the arrays are not ``[B, T]`` with ``T >= 2``.
        InvalidArgumentError: ``discount`` outside ``[0, 1]``.
    """
    gamma = check_discount(discount)
    reward = np.asarray(reward)
    is_last = np.asarray(is_last, dtype=bool)
    is_terminal = np.asarray(is_terminal, dtype=bool)
    if (
        is_last.ndim != 2
        or is_last.shape[1] < 2
        or reward.shape[:2] != is_last.shape
        or (is_terminal.shape != is_last.shape)
    ):
        raise ShapeError(
            f"n_step_returns needs windows [B, n + 1] with n >= 1: reward [B, T, ...], is_last "
            f"and is_terminal [B, T]; got reward {reward.shape}, is_last {is_last.shape}, "
            f"is_terminal {is_terminal.shape}. Sample with num_steps=n + 1."
        )
    n = is_last.shape[1] - 1
    k = np.where(is_last.any(axis=1), np.argmax(is_last, axis=1), n).astype(np.int64)
    rows = np.arange(len(k))
    terminated = is_last[rows, k] & is_terminal[rows, k]
    total, bootstrap = discounted_sum(reward[:, :n], k, gamma)
    return NStepReturns(total, bootstrap, terminated, k)


def n_step_transitions(
    data: Any,
    discount: float,
    *,
    observation: str = "observation",
    action: str = "action",
    reward: str = "reward",
    is_last: str = "is_last",
    is_terminal: str = "is_terminal",
) -> dict[str, Any]:
    """n-step transitions from a ReplayBuffer sample's ``data`` (RLDS windows ``[B, n + 1]``).

    Args:
        data: ``Sample.data``, a dict of windows ``[B, n + 1, ...]``.
        discount: ``gamma`` in ``[0, 1]``.
        observation, action, reward, is_last, is_terminal: keys in ``data``;
            observation and action may be nests.

    Returns:
        dict with ``observation`` and ``action`` (when ``data`` has it) of step 0, ``reward``,
        ``next_observation`` (observation of step ``k``), ``discount``
        (``gamma^k``), ``terminated`` and ``num_steps`` (see :class:`NStepReturns`).

    Example:
        >>> s = buf.sample(256, num_steps=4, within_episode=False)  # 3-step transitions
        >>> batch = n_step_transitions(s.data, discount=0.99)
    """
    import optree

    returns = n_step_returns(data[reward], data[is_last], data[is_terminal], discount)
    rows = np.arange(len(returns.num_steps))

    def at(step: Any) -> Any:
        return optree.tree_map(lambda x: np.asarray(x)[rows, step], data[observation])

    out = {"observation": at(0)}
    if action in data:
        out["action"] = optree.tree_map(lambda x: np.asarray(x)[:, 0], data[action])
    return out | {
        "reward": returns.reward,
        "next_observation": at(returns.num_steps),
        "discount": returns.discount,
        "terminated": returns.terminated,
        "num_steps": returns.num_steps,
    }
