"""Routing of sample ids to shards: each table's ids carry its own shard numbers.

A service numbers the shards of all its tables one after another (table after
table, in the order served), so an id names its table's shard too
(:mod:`recollect.ids`); a table's shards hand out ids of their own index, and
the client adds the table's first shard number (its ``base``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from recollect import ids as id_layout
from recollect.errors import InvalidArgumentError

__all__ = ["id_bases", "route", "tag_ids"]


def id_bases(shards: Mapping[str, Sequence[Any]]) -> dict[str, int]:
    """``{table: number of its first shard}`` of the service's ``{table: [shard, ...]}``.

    Raises:
        InvalidArgumentError: more than ``recollect.ids.MAX_SHARDS`` shards in all.
    """
    sizes = [len(e) for e in shards.values()]
    bases = dict(zip(shards, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True))
    total = sum(sizes)
    if total > id_layout.MAX_SHARDS:
        raise InvalidArgumentError(
            f"a service serves at most {id_layout.MAX_SHARDS} shards over all its tables "
            f"(ids hold 8 bits of shard); got {total}. Serve fewer shards per table, or "
            "tables in several services."
        )
    return bases


def tag_ids(ids: np.ndarray, base: int) -> np.ndarray:
    """A shard's int64 ids ``[B]`` as the ids of a table whose shards start at ``base``."""
    return ids + (base << id_layout.SHARD_SHIFT) if base else ids


def route(
    ids: np.ndarray, priorities: np.ndarray, base: int, num_shards: int
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``[(shard, its ids, their priorities)]``: each id of a table to the shard it names.

    Args:
        ids: int64 ``[B]`` the service's ids; priorities: float64 ``[B]``.
        base: the table's first shard number; num_shards: its shards.

    Ids naming no shard of the table (another table's, negative ids) are left
    out, as a local buffer skips ids of another shard.
    """
    shard = id_layout.shard_of(ids) - base
    local = ids - (base << id_layout.SHARD_SHIFT) if base else ids
    if num_shards == 1 and not shard.any():  # the common case: no mask to apply
        return [(0, local, priorities)]
    return [
        (int(s), local[shard == s], priorities[shard == s])
        for s in np.unique(shard)
        if 0 <= s < num_shards
    ]
