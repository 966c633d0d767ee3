"""Drivers: step a gymnasium vector env and feed RLDS steps to observers.

gymnasium 1.x vector envs autoreset in ``NEXT_STEP`` mode (the default): the
``step`` after the one that returned ``terminated or truncated`` ignores its
action, resets that env and returns the reset observation with reward 0 and
``terminated = truncated = False``. That step is exactly the RLDS final step
of the episode, so every env call maps to one RLDS step per env:

=========================  ====================================================
RLDS step ``t`` of an env  from the vector env
=========================  ====================================================
``observation``            the observation before the call (``o_t``)
``action``                 the action passed (ignored by the env on a final step)
``reward``                 the reward the call returned (``r_t``, follows ``a_t``)
``discount``               0 when the call returned ``terminated``, else 1
``is_first``               the previous step was a final step (or ``t = 0``)
``is_last``                the previous call returned ``terminated or truncated``
``is_terminal``            the previous call returned ``terminated``
=========================  ====================================================

A truncated episode (time limit) ends with ``is_last`` but not
``is_terminal``, so its last transition still bootstraps. A
:class:`~recollect.ReplayBuffer` with this spec never samples a window that
contains an ``is_last`` step before its last step, so ``[step_t, step_t+1]``
never pairs an episode's final observation with the next episode's first.

Imports no framework and not gymnasium: any object with gymnasium's vector
API (``reset(seed=)``, ``step(actions)``, ``num_envs``, ``metadata``) works.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError

__all__ = ["VectorEnvDriver"]


def _autoreset_mode(env: Any) -> str:
    mode = getattr(env, "metadata", {}).get("autoreset_mode")
    return str(getattr(mode, "name", mode))


class VectorEnvDriver:
    """Steps a gymnasium vector env (autoreset ``NEXT_STEP``) and calls observers with RLDS steps.

    The TF-Agents driver shape: :meth:`step` acts once in every env and calls
    ``observer(steps)`` for each observer with a dict whose leaves have leading
    dim ``num_envs`` (``ReplayBuffer.add_batch`` and
    :class:`~recollect.observers.Observer` are such observers). Steps are
    ``observation, action, reward, discount, is_first, is_last,
    is_terminal`` as the env returns them (``discount`` float32, flags bool);
    the buffer casts them to its spec. The mapping is in the module docstring.

    Args:
        env: a gymnasium vector env in ``NEXT_STEP`` autoreset mode.
        observers: callables taking one batch of steps.
        seed: passed to ``env.reset(seed=...)``.

    Attributes:
        obs: the current observations ``[num_envs, ...]`` (what a policy acts on).

    Raises:
        InvalidArgumentError: the env autoresets in another mode
            (``SAME_STEP``, ``DISABLED``) or does not say (gymnasium < 1.0).

    Example:
        >>> env = gymnasium.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
        >>> buffer = ReplayBuffer(spec, 100_000, num_envs=4)
        >>> driver = VectorEnvDriver(env, [buffer.add_batch], seed=0)
        >>> steps = driver.step(policy(driver.obs))
    """

    def __init__(
        self,
        env: Any,
        observers: Iterable[Callable[[dict[str, np.ndarray]], Any]] = (),
        seed: int | None = None,
    ) -> None:
        mode = _autoreset_mode(env)
        if mode != "NEXT_STEP":
            raise InvalidArgumentError(
                f"VectorEnvDriver needs a vector env that autoresets in NEXT_STEP mode "
                f"(gymnasium >= 1.0's default); got autoreset_mode={mode}. Create it with "
                "gymnasium.make_vec(..., vector_kwargs={'autoreset_mode': "
                "gymnasium.vector.AutoresetMode.NEXT_STEP})."
            )
        self.env, self.observers = env, list(observers)
        self.obs, _ = env.reset(seed=seed)
        n = env.num_envs
        self._first = np.ones(n, bool)  # the next step opens an episode
        self._ended = np.zeros(n, bool)  # the current observation is an episode's last
        self._terminal = np.zeros(n, bool)

    @property
    def num_envs(self) -> int:
        """Envs stepped together (the buffer's ``num_envs``)."""
        return int(self.env.num_envs)

    def step(self, actions: Any) -> dict[str, np.ndarray]:
        """Acts with ``actions`` ``[num_envs, ...]``; returns the RLDS steps given to observers."""
        actions = np.asarray(actions)
        next_obs, reward, terminated, truncated, _ = self.env.step(actions)
        terminated, truncated = np.array(terminated, bool), np.array(truncated, bool)  # copies
        steps = {
            "observation": self.obs,
            "action": actions,
            "reward": np.asarray(reward),
            "discount": (~terminated).astype(np.float32),
            "is_first": self._first,
            "is_last": self._ended,
            "is_terminal": self._terminal,
        }
        for observer in self.observers:
            observer(steps)
        # On a final step the env reset: terminated/truncated are False there.
        self._first = self._ended
        self._ended = terminated | truncated
        self._terminal = terminated
        self.obs = next_obs
        return steps
