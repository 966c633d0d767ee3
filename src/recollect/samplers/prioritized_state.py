"""Checkpoint state of :class:`~recollect.Prioritized` (and the heaps built on it): what
``state_dict`` saves and how ``load_state_dict`` restores it, as functions of the
sampler's :class:`~recollect.samplers.window_values.WindowValues` and scalars.

The fields are plain numpy arrays and floats (no pickle): the tree's leaf
values, each slot's window start time (-1 where none), the per-row last
episode end, the running max priority, the exponents, the number of valid
windows, whether the buffer is episode-aware, and (``alpha == 0`` only) the raw
priorities. The format is that of checkpoint format 1.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.samplers.priority_checks import check_state_values
from recollect.samplers.window_values import WindowValues

__all__ = ["Scalars", "load_state", "save_state", "start_state"]


class Scalars(NamedTuple):
    """The sampler's scalars a checkpoint restores."""

    max_priority: float
    priority_exponent: float
    epsilon: float


def save_state(values: WindowValues, scalars: Scalars, episode_aware: bool) -> dict[str, Any]:
    """Leaf values, validity and scalars (plain numpy arrays and floats, no pickle)."""
    return {
        "values": values.tree.values.copy(),
        "start": start_state(values),
        "last_end": values.last_end.copy(),
        "max_priority": scalars.max_priority,
        "priority_exponent": scalars.priority_exponent,
        "epsilon": scalars.epsilon,
        "num_valid": values.num_valid,
        "episode_aware": int(episode_aware),  # kept for the format; not read back
        **({"priority": values.priority.copy()} if len(values.priority) else {}),
    }


def start_state(values: WindowValues) -> np.ndarray:
    """int64 ``[size]``: start time of the valid window of each slot, -1 where none
    (the checkpoint field ``start``, as format 1 stored it)."""
    start = np.full(len(values.valid), -1, np.int64)
    keys = np.flatnonzero(values.valid)
    start[keys] = values.start_times(keys)[1]
    return start


def load_state(values: WindowValues, state: dict[str, Any]) -> Scalars:
    """Restores :func:`save_state` output into ``values`` (the buffer must have the same
    shape); returns the scalars it holds.

    The window index must be restored first: start times are derived from its clocks.

    Raises:
        InvalidArgumentError: the state does not fit (shape, non-finite or negative values).
    """
    tree = values.tree
    leaves = np.asarray(state["values"], dtype=np.float64)
    if leaves.shape != (tree.capacity,):
        raise InvalidArgumentError(
            f"prioritized sampler state has {leaves.shape} priorities; this buffer needs "
            f"({tree.capacity},). Load it into a buffer of the same capacity."
        )
    check_state_values(state, leaves)
    tree.fill(leaves)
    values.valid[:] = np.asarray(state["start"], dtype=np.int64) >= 0
    if len(values.priority):  # alpha == 0: raw priorities are state of their own
        raw = state.get("priority")
        values.priority[:] = np.where(values.valid, 1.0, 0.0) if raw is None else raw
    values.last_end = np.asarray(state["last_end"], dtype=np.int64).copy()
    values.num_valid = int(state["num_valid"])
    # "episode_aware" is not read back: the table told it at bind (its spec decides);
    # older checkpoints may hold 1 for a table without is_last (its ``add`` path said so)
    return Scalars(
        float(state["max_priority"]), float(state["priority_exponent"]), float(state["epsilon"])
    )
