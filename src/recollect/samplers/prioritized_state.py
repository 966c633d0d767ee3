"""Checkpoint state of :class:`~recollect.Prioritized` (and the heaps built on it): what
``state_dict`` saves and how ``load_state_dict`` restores it (a mixin).

The fields are plain numpy arrays and floats (no pickle): the tree's leaf
values, each slot's window start time (-1 where none), the per-row last
episode end, the running max priority, the exponents, the number of valid
windows, whether the buffer is episode-aware, and (``alpha == 0`` only) the raw
priorities. The format is that of checkpoint format 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.samplers.priority_checks import check_state_values
from recollect.samplers.sum_tree import SumTree

__all__ = ["PrioritizedState"]


class PrioritizedState:
    """``state_dict`` / ``load_state_dict`` of a prioritized sampler (a mixin)."""

    _tree: SumTree
    _valid: np.ndarray
    _priority: np.ndarray
    _last_end: np.ndarray
    max_priority: float
    priority_exponent: float
    epsilon: float
    num_valid: int
    episode_aware: bool
    _drawn: tuple[np.ndarray, bytes, int] | None

    def _start_times(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Leaf values, validity and scalars (plain numpy arrays and floats, no pickle)."""
        return {
            "values": self._tree.values.copy(),
            "start": self._start_state(),
            "last_end": self._last_end.copy(),
            "max_priority": self.max_priority,
            "priority_exponent": self.priority_exponent,
            "epsilon": self.epsilon,
            "num_valid": self.num_valid,
            "episode_aware": int(self.episode_aware),  # kept for the format; not read back
            **({"priority": self._priority.copy()} if len(self._priority) else {}),
        }

    def _start_state(self) -> np.ndarray:
        """int64 ``[size]``: start time of the valid window of each slot, -1 where none
        (the checkpoint field ``start``, as format 1 stored it)."""
        start = np.full(len(self._valid), -1, np.int64)
        keys = np.flatnonzero(self._valid)
        start[keys] = self._start_times(keys)[1]
        return start

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (the buffer must have the same shape).

        The window index must be restored first: start times are derived from its clocks.
        """
        values = np.asarray(state["values"], dtype=np.float64)
        if values.shape != (self._tree.capacity,):
            raise InvalidArgumentError(
                f"prioritized sampler state has {values.shape} priorities; this buffer needs "
                f"({self._tree.capacity},). Load it into a buffer of the same capacity."
            )
        check_state_values(state, values)
        self._drawn = None
        self._tree.fill(values)
        self._valid[:] = np.asarray(state["start"], dtype=np.int64) >= 0
        if len(self._priority):  # alpha == 0: raw priorities are state of their own
            raw = state.get("priority")
            self._priority[:] = np.where(self._valid, 1.0, 0.0) if raw is None else raw
        self._last_end = np.asarray(state["last_end"], dtype=np.int64).copy()
        self.max_priority = float(state["max_priority"])
        self.priority_exponent = float(state["priority_exponent"])
        self.epsilon = float(state["epsilon"])
        self.num_valid = int(state["num_valid"])
        # "episode_aware" is not read back: the table told it at bind (its spec decides);
        # older checkpoints may hold 1 for a table without is_last (its ``add`` path said so)
