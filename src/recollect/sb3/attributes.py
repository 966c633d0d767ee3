"""SB3's public buffer attributes on recollect storage (``observations`` ... ``n_steps``).

With SB3's layout every array is a view of recollect's storage (see
:class:`recollect.sb3.arrays.Sb3Arrays`); buffers that store each observation
once (``frame_stack``, ``optimize_memory_usage``) have no such arrays, and
their ``dones`` only takes SB3's writes (:class:`TrajectoryCuts`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError

__all__ = ["Sb3Attributes", "TrajectoryCuts"]


class TrajectoryCuts:
    """Stands in for SB3's ``dones`` array where SB3 writes to it from outside.

    SB3's ``_setup_learn`` marks the newest transition done
    (``replay_buffer.dones[pos] = True``) before a fresh ``learn()`` of a model
    with ``optimize_memory_usage``, so that its single observation array does
    not join the old trajectory to the new one. recollect needs no mark: the
    observation after the env reset does not continue the stored
    ``next_obs``, so the trajectory is cut there anyway. Writes are accepted
    and change nothing; reads raise.
    """

    def __setitem__(self, key: Any, value: Any) -> None:
        del key, value

    def __getitem__(self, key: Any) -> Any:
        raise InvalidArgumentError(
            "recollect.sb3 buffers keep no `dones` array; sample() returns the dones."
        )


class Sb3Attributes:
    """Mixin of :class:`recollect.sb3.ReplayBuffer`: SB3's array attributes and ``n_steps``.

    Needs ``sb3_layout``, ``transitions``, ``cuts`` and ``n_step`` on the instance.
    """

    sb3_layout: bool
    transitions: Any
    cuts: TrajectoryCuts
    n_step: int

    def sb3_array(self, name: str) -> Any:
        """SB3's array ``name`` (a view of the storage); AttributeError without SB3's layout."""
        if self.sb3_layout:
            return self.transitions.view(name)
        raise AttributeError(
            f"{type(self).__name__} with frame_stack or optimize_memory_usage stores each "
            f"observation once and has no SB3 `{name}` array; use sample() or _get_samples()."
        )

    @property
    def observations(self) -> Any:
        """SB3's ``observations`` ``[buffer_size, n_envs, *obs_shape]`` (a dict of them for
        Dict spaces): a view of the stored observations; writes land in the buffer."""
        return self.sb3_array("observations")

    @property
    def next_observations(self) -> Any:
        """SB3's ``next_observations`` (as ``observations``)."""
        return self.sb3_array("next_observations")

    @property
    def actions(self) -> np.ndarray:
        """SB3's ``actions`` ``[buffer_size, n_envs, action_dim]`` (a view)."""
        return self.sb3_array("actions")

    @property
    def rewards(self) -> np.ndarray:
        """SB3's float32 ``rewards`` ``[buffer_size, n_envs]`` (a view)."""
        return self.sb3_array("rewards")

    @property
    def dones(self) -> Any:
        """SB3's float32 ``dones`` ``[buffer_size, n_envs]`` (a view; writes such as
        ``dones[pos - 1] = True`` take effect). With ``frame_stack`` or
        ``optimize_memory_usage``: an object that accepts SB3's writes and ignores them
        (see :class:`TrajectoryCuts`)."""
        return self.transitions.view("dones") if self.sb3_layout else self.cuts

    @property
    def timeouts(self) -> np.ndarray:
        """SB3's float32 ``timeouts`` ``[buffer_size, n_envs]`` (a view)."""
        return self.sb3_array("timeouts")

    @property
    def n_steps(self) -> int:
        """SB3's spelling of ``n_step``."""
        return self.n_step
