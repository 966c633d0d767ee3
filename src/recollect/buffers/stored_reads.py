"""Reading every stored step of a :class:`~recollect.ReplayBuffer` (oldest first), and
their ids: the export side of the buffer (datasets, inspection), not sampling."""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.buffers.buffer_part import BufferPart
from recollect.errors import InvalidArgumentError
from recollect.ids import encode

__all__ = ["StoredReader"]


class StoredReader(BufferPart):
    """Every stored step of a :class:`~recollect.ReplayBuffer`'s rows, oldest first, and
    their ids; a collaborator of the buffer, reading its ``table`` and ``storage``.

    Args:
        flat: the buffer's flattened spec.
        table: the buffer's table (window index, lock, shard).
        storage: the buffer's storage.
    """

    def gather_stored(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps; use
                :meth:`gather_row` per row.
        """
        with self._table.lock:
            times = self._stored_times("gather them one at a time with gather_row(row)")
            rows = np.broadcast_to(np.arange(self._num_envs)[:, None], times.shape)
            leaves = self._storage.gather(rows, times % self._max_length, times=times)
            return self._flat.unflatten([np.array(leaf) for leaf in leaves])

    def gather_row(self, row: int) -> Any:
        """All stored steps of env row ``row``: leaves ``[steps, *shape]``, oldest first."""
        with self._table.lock:
            index = self._table.index
            times = np.arange(index.lo[row], index.hi[row], dtype=np.int64)
            rows = np.full(len(times), row, np.int64)
            leaves = self._storage.gather(rows, times % self._max_length, times=times)
            return self._flat.unflatten([np.array(leaf) for leaf in leaves])

    def item_ids(self) -> np.ndarray:
        """Ids of all stored steps, int64 ``[num_envs, steps_per_row]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps.
        """
        with self._table.lock:
            times = self._stored_times("decode ids per row with recollect.ids.encode(row, times)")
            return encode(np.arange(self._num_envs)[:, None], times, self._table.shard)

    def _stored_times(self, what_to_do: str) -> np.ndarray:
        """int64 ``[num_envs, steps_per_row]``: the stored step times of every row, oldest
        first (the table lock held).

        Raises:
            InvalidArgumentError: rows hold different numbers of steps (the message ends
                with ``what_to_do``).
        """
        index = self._table.index
        lo, hi = index.lo, index.hi
        count = int(hi[0] - lo[0])
        if not ((hi - lo) == count).all():
            raise InvalidArgumentError(
                f"rows hold different numbers of steps ({(hi - lo).tolist()}); {what_to_do}."
            )
        return lo[:, None] + np.arange(count)
