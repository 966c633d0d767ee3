"""Item ids: one never-reused int64 per stored step, encoding ``(shard, row, time)``.

Layout (bit 63, the sign bit, is always 0)::

    id = shard << 55 | row << 40 | time
         8 bits        15 bits     40 bits

``time`` is the step's position in its env row's own clock (the row's
``t``-th write, counted from 0 and never reset, also not by ``clear``), ``row``
the env row within its table shard and ``shard`` the shard of a table served
by :mod:`recollect.service` (0 for an in-process buffer). So an id names the
step for the table's lifetime, and a service routes ``update_priorities`` to
the shard that owns an id without a lookup.

In a service the ``shard`` field also tells the tables apart: the shards of
all tables are numbered one after another in the order the tables were
served (table 0's shards 0..n0-1, table 1's n0..n0+n1-1, ...), so an id of
one table passed to another table's ``update_priorities`` names no shard of
it and is skipped (counted in the skips ``wait=True`` returns), like an id
overwritten meanwhile. A service serves at most 256 shards over all its
tables. The shards themselves (and their checkpoints) keep the numbers 0..n-1
of their table; the service's client adds and removes the table's offset.

Limits: 256 shards, 32,768 rows per shard, 2**40 (about 1.1e12) steps per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError

__all__ = ["MAX_ROWS", "MAX_SHARDS", "MAX_TIME", "SHARD_SHIFT", "decode", "encode", "shard_of"]

TIME_BITS = 40
ROW_BITS = 15
SHARD_BITS = 8
MAX_TIME = 1 << TIME_BITS
MAX_ROWS = 1 << ROW_BITS
MAX_SHARDS = 1 << SHARD_BITS
ROW_SHIFT = _ROW_SHIFT = TIME_BITS
SHARD_SHIFT = _SHARD_SHIFT = TIME_BITS + ROW_BITS


def encode(rows: Any, times: Any, shard: int = 0) -> np.ndarray:
    """Ids of steps ``times`` of env rows ``rows`` (broadcast together) in table shard ``shard``.

    Args:
        rows: int ``[...]`` env rows in ``[0, MAX_ROWS)``.
        times: int ``[...]`` row step times in ``[0, MAX_TIME)``.
        shard: the table shard, in ``[0, MAX_SHARDS)``.

    Returns:
        int64 ids, the broadcast shape of ``rows`` and ``times``.
    """
    ids = (np.asarray(rows, dtype=np.int64) << _ROW_SHIFT) | np.asarray(times, dtype=np.int64)
    if shard:
        ids |= int(shard) << _SHARD_SHIFT
    return ids


def decode(ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Splits ids into ``(shard, row, time)``, each int64 of the shape of ``ids``.

    Raises:
        InvalidArgumentError: ``ids`` are not integers, or some are negative
            (no id ever is).
    """
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise InvalidArgumentError(f"ids must be integers (Sample.ids); got dtype {ids.dtype}.")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and int(ids.min()) < 0:
        raise InvalidArgumentError(
            f"ids are never negative; got {int(ids.min())}. Pass ids returned by sample()."
        )
    return ids >> _SHARD_SHIFT, (ids >> _ROW_SHIFT) & (MAX_ROWS - 1), ids & (MAX_TIME - 1)


def shard_of(ids: np.ndarray) -> np.ndarray:
    """The shard of each int64 id, -1 for a negative one (no id ever is; a buffer skips it)."""
    return np.where(ids >= 0, ids >> _SHARD_SHIFT, -1)


def check_geometry(num_envs: int, shard: int = 0) -> None:
    """Raises InvalidArgumentError when ``num_envs`` rows or ``shard`` do not fit the id layout."""
    if num_envs > MAX_ROWS:
        raise InvalidArgumentError(
            f"`num_envs` must be <= {MAX_ROWS} (ids hold 15 bits of row); got num_envs="
            f"{num_envs}. Split the rows over several tables or shards."
        )
    if not 0 <= shard < MAX_SHARDS:
        raise InvalidArgumentError(f"`shard` must be in [0, {MAX_SHARDS}); got shard={shard}.")
