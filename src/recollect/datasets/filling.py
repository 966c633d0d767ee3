"""Loading whole episodes into a new :class:`~recollect.ReplayBuffer`, row by row.

Rows of a buffer advance together (``add_batch`` writes one step to every
row), so a buffer of ``num_envs`` rows is filled in lockstep:

1. :func:`plan_rows` hands episodes to rows, newest first, each to the row
   holding the fewest steps, until one no longer fits in a row's
   ``capacity // num_envs`` steps; every row then holds its episodes oldest
   first.
2. :func:`write_rows` writes the newest ``T`` steps of every row, ``T`` being
   the smallest row total. Every row ends on an ``is_last`` step; with
   ``num_envs > 1`` a row may start inside an episode (as after the ring
   wrapped), and up to one episode per row is left out. No step is invented.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers import ReplayBuffer
from recollect.errors import InvalidArgumentError
from recollect.specs import FlatSpec

__all__ = ["plan_rows", "row_length", "write_rows"]


def row_length(capacity: int | None, num_envs: int) -> int | None:
    """Checks ``capacity`` and ``num_envs`` up front; returns steps per row (None: unbounded).

    Raises:
        InvalidArgumentError: not positive ints, or ``capacity`` not a multiple of ``num_envs``.
    """
    num_envs = positive_int("num_envs", num_envs)
    if capacity is None:
        return None
    capacity = positive_int("capacity", capacity)
    if capacity % num_envs:
        raise InvalidArgumentError(
            f"`capacity` must be a multiple of `num_envs`; got capacity={capacity}, "
            f"num_envs={num_envs}. Use capacity={max(num_envs, capacity - capacity % num_envs)}."
        )
    return capacity // num_envs


def plan_rows(
    lengths: Sequence[int] | np.ndarray, num_envs: int, max_length: int | None
) -> list[list[int]]:
    """Assigns episodes to rows, newest first, balancing the rows' step counts.

    Args:
        lengths: RLDS steps of every episode, int ``[N]``, oldest first.
        num_envs: rows.
        max_length: steps a row holds (``capacity // num_envs``); None: unbounded.

    Returns:
        For every row, the indices of its episodes, oldest first. Episodes
        older than the first one that does not fit are left out.

    Raises:
        InvalidArgumentError: no episode fits into a row.
    """
    totals = np.zeros(num_envs, np.int64)
    rows: list[list[int]] = [[] for _ in range(num_envs)]
    for i in range(len(lengths) - 1, -1, -1):  # one iteration per episode, not per step
        row = int(np.argmin(totals))
        if max_length is not None and totals[row] + lengths[i] > max_length:
            break
        totals[row] += lengths[i]
        rows[row].append(i)
    if len(lengths) and not any(rows):
        raise InvalidArgumentError(
            f"no episode fits into a buffer row of max_length={max_length} steps (capacity // "
            f"num_envs); the newest episode has {lengths[-1]} steps. Increase capacity."
        )
    return [row[::-1] for row in rows]


def _append(buf: ReplayBuffer, flat: FlatSpec, leaves: list[np.ndarray]) -> None:
    """Appends ``T`` steps to every row; leaves ``[T, num_envs, ...]``.

    One validated block write per call (:meth:`ReplayBuffer.extend`), leaves
    moved to ``[num_envs, T, ...]`` without a copy.
    """
    buf.extend(flat.unflatten([np.swapaxes(leaf, 0, 1) for leaf in leaves]))


def write_rows(
    flat: FlatSpec,
    rows: list[list[list[np.ndarray]]],
    capacity: int | None,
    **buffer_kwargs: Any,
) -> ReplayBuffer:
    """Creates a buffer and writes every row's episodes into it (see the module docstring).

    Args:
        flat: the buffer's spec, flattened.
        rows: for every row, its episodes oldest first, each a list of leaves
            ``[len, ...]`` in ``flat`` order.
        capacity: total steps; None: ``num_envs * T`` (the rows exactly).
        buffer_kwargs: passed to :class:`~recollect.ReplayBuffer` (``rng``, ``sampler``, ...).

    Raises:
        InvalidArgumentError: some rows but not all have no episode.
        SpecError, ShapeError, DTypeError, CastError: a step does not fit the spec.
    """
    num_envs = len(rows)
    empty = sum(not eps for eps in rows)
    if empty and empty < num_envs:
        raise InvalidArgumentError(
            f"{empty} of num_envs={num_envs} rows would get no episode (there are fewer "
            "episodes than rows, or capacity leaves too little room); rows advance in "
            "lockstep, so every row needs one. Use a smaller num_envs or a larger capacity."
        )
    per_row = [
        [np.concatenate([ep[i] for ep in eps]) if eps else None for i in range(len(flat.paths))]
        for eps in rows
    ]
    steps = min((0 if row[0] is None else len(row[0])) for row in per_row)
    if capacity is None:
        capacity = num_envs * max(steps, 1)
    buf = ReplayBuffer(flat.spec, capacity, num_envs, **buffer_kwargs)
    if steps == 0:
        return buf
    leaves = []
    for i in range(len(flat.paths)):
        newest = []
        for row in per_row:  # one iteration per row and leaf, not per step
            column = row[i]
            assert column is not None  # steps > 0: every row has episodes
            newest.append(column[len(column) - steps :])
        leaves.append(np.stack(newest, axis=1))  # [T, num_envs, ...]
    _append(buf, flat, leaves)
    return buf
