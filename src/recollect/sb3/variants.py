"""SB3's buffer variants under their SB3 names: ``DictReplayBuffer`` and ``NStepReplayBuffer``.

:class:`recollect.sb3.ReplayBuffer` already takes Dict spaces and n-step
sampling; these classes keep SB3's constructors (and their checks) so code
that names SB3's variants swaps in by its import alone.
"""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from recollect.errors import InvalidArgumentError
from recollect.sb3.buffers import ReplayBuffer

__all__ = ["DictReplayBuffer", "NStepReplayBuffer"]


class DictReplayBuffer(ReplayBuffer):
    """SB3's ``DictReplayBuffer``: :class:`ReplayBuffer` for a Dict observation space.

    ``observations`` and ``next_observations`` are dicts of arrays
    ``[buffer_size, n_envs, *shape]``; samples are ``DictReplayBufferSamples``.

    Raises:
        InvalidArgumentError: a space that is not a ``gymnasium.spaces.Dict``.
    """

    def __init__(self, buffer_size: int, observation_space: Any, *args: Any, **kwargs: Any):
        if not isinstance(observation_space, spaces.Dict):
            raise InvalidArgumentError(
                f"DictReplayBuffer needs a Dict observation space; got {observation_space}. "
                "Use recollect.sb3.ReplayBuffer for other spaces."
            )
        super().__init__(buffer_size, observation_space, *args, **kwargs)


class NStepReplayBuffer(ReplayBuffer):
    """SB3's ``NStepReplayBuffer``: :class:`ReplayBuffer` with ``n_steps=3`` by default.

    Samples carry n-step returns and ``discounts`` (``gamma^k``) exactly as
    SB3's: summed up to the first done or timeout, the newest stored step of
    each env counting as a timeout.

    Args:
        *args, **kwargs: as :class:`ReplayBuffer`.
        n_steps: transitions summed per sample (>= 1).
        gamma: discount in ``[0, 1]``.
    """

    def __init__(self, *args: Any, n_steps: int = 3, gamma: float = 0.99, **kwargs: Any):
        super().__init__(*args, n_steps=n_steps, gamma=gamma, **kwargs)
