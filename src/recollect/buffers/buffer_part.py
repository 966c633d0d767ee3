"""BufferPart: the base of a :class:`~recollect.ReplayBuffer`'s collaborators (its reader,
writer and stored-step reads), which all work over the buffer's spec, table and storage."""

from __future__ import annotations

from typing import Any

from recollect.specs import FlatSpec
from recollect.storage.base import Storage
from recollect.table import Table

__all__ = ["BufferPart"]


class BufferPart:
    """One part of a :class:`~recollect.ReplayBuffer`, over the buffer's flattened spec,
    table and storage (each part holds the same three objects as the buffer).

    Args:
        flat: the buffer's flattened spec.
        table: the buffer's table (window index, sampler, clocks, lock).
        storage: the buffer's storage.
    """

    def __init__(self, flat: FlatSpec, table: Table, storage: Storage) -> None:
        self._flat = flat
        self._table = table
        self._storage = storage
        self._num_envs = table.num_envs
        self._max_length = table.max_length

    @property
    def flat_spec(self) -> FlatSpec:
        """The flattened spec: leaf paths, shapes and dtypes in storage order."""
        return self._flat

    @property
    def data_spec(self) -> Any:
        """The spec of one step (a nest of :class:`~recollect.ArraySpec`)."""
        return self._flat.spec
