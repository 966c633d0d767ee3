"""Which windows of a prioritized sampler hold a sampling value: the table's write
hooks of :class:`~recollect.Prioritized` (and the heaps built on it; a mixin).

Windows are keyed by the storage slot of their first step,
``row * max_length + time % max_length``, in a :class:`SumTree` holding
``(p + epsilon)^alpha``. One bool per slot says whether its window is valid;
its start time needs no storage: it is the one time of that slot still stored
(in ``[t - max_length, t)`` of the row's clock ``t``), since a window loses its
value when its first step is overwritten. A window gets a value when it becomes
complete and valid (current max priority), and loses it (zero) when its first
step is overwritten, it is removed or the buffer is cleared. Windows containing
an episode end before their last step never get a value. So invalid windows have
zero probability, always, by construction.
"""

from __future__ import annotations

import numpy as np

from recollect.samplers.sum_tree import SumTree
from recollect.windows import WindowIndex

__all__ = ["WindowValues"]


class WindowValues:
    """``on_add``, ``on_add_block``, ``on_end_episodes``, ``on_remove``, ``on_clear`` of a
    prioritized sampler: they keep its sum tree, validity bits and count of valid windows
    (a mixin)."""

    index: WindowIndex
    sequence_length: int | None
    max_priority: float
    priority_exponent: float
    epsilon: float
    num_valid: int
    episode_aware: bool
    _tree: SumTree
    _valid: np.ndarray  # bool [size]: whether the window keyed by each slot is valid
    _priority: np.ndarray  # float64 raw priorities [size] (alpha == 0), else [0]
    _last_end: np.ndarray  # int64 [num_envs]: the last episode end the windows saw
    _length: int  # max_length
    _all_rows: np.ndarray
    _row_base: np.ndarray  # int64 [num_envs]: row * max_length
    _drawn: tuple[np.ndarray, bytes, int] | None  # forgotten on every change

    def _set(
        self,
        keys: np.ndarray,
        values: np.ndarray,
        old: np.ndarray | None = None,
        parents: list[np.ndarray] | None = None,
    ) -> None:
        """Sets the sampling values of ``keys`` in the sum tree (and its minimum); ``old``
        and ``parents``: their current values and nodes, when the caller has them (a
        search's; see :meth:`SumTree.set`)."""
        self._tree.set(keys, values, old, parents)
        self._values_set(keys, values)

    def _values_set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Called after :meth:`_set` (raw priorities already stored); heaps keep their keys."""

    def on_add(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        """Zeroes the windows whose first step was just overwritten; scores the new windows."""
        self._drawn = None
        index, n = self.index, self.sequence_length
        assert n is not None  # bind refuses None
        # lo = max(t_clear, t - max_length) and n <= max_length: only t_clear can cut the window
        where: slice | np.ndarray
        if rows is None:  # every row: whole arrays, no fancy indexing
            t, base, cleared = index.t, self._row_base, index.t_clear
            last_end, where = self._last_end, slice(None)
        else:
            where = rows
            t, base, cleared = index.t[rows], self._row_base[rows], index.t_clear[rows]
            last_end = self._last_end[rows]
        # step t - 1 was just written to each row
        gone = base + (t - 1) % self._length
        start = t - n
        ok = start >= cleared
        if is_last is not None:
            ok &= last_end < start  # no episode end before the window's last step
            self._last_end[where] = index.last_end[where]
        self.num_valid -= int(np.count_nonzero(self._valid[gone]))
        self._valid[gone] = False
        value = (self.max_priority + self.epsilon) ** self.priority_exponent  # finite: checked
        if n == 1:  # the new window is keyed by the overwritten slot: set each key once
            self._valid[gone[ok]] = True
            if len(self._priority):
                self._priority[gone[ok]] = self.max_priority
            self.num_valid += int(np.count_nonzero(ok))
            self._set(gone, np.where(ok, value, 0.0))
            return
        new = (base + start % self._length)[ok]
        self._valid[new] = True
        if len(self._priority):
            self._priority[new] = self.max_priority
        self.num_valid += len(new)
        values = np.concatenate([np.zeros(len(gone)), np.full(len(new), value)])
        self._set(np.concatenate([gone, new]), values)

    def on_add_block(self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None) -> None:
        """:meth:`on_add` of ``count`` (<= ``max_length``) steps per row, in one pass.

        Equals ``count`` calls of :meth:`on_add`: every overwritten slot loses its
        window, then every window completed by the block is scored, except those
        crossing an episode end, cleared, or whose first step the block overwrote.
        """
        self._drawn = None
        index, n, length = self.index, self.sequence_length, self._length
        assert n is not None  # bind refuses None
        row_ids = self._all_rows if rows is None else rows
        t = index.t[row_ids]  # after the block
        times = (t - count)[:, None] + np.arange(count)  # [k, count] the written times
        base = self._row_base[row_ids][:, None]
        gone = (base + times % length).reshape(-1)
        start = times - (n - 1)  # the window each written step completes
        ok = (start >= index.t_clear[row_ids][:, None]) & (start >= (t - length)[:, None])
        if is_last is not None:  # the newest end before each written step
            ends = np.where(is_last, times, -1)
            before = np.empty_like(ends)
            before[:, 0] = self._last_end[row_ids]
            np.maximum.accumulate(ends[:, :-1], axis=1, out=before[:, 1:])
            np.maximum(before[:, 1:], before[:, :1], out=before[:, 1:])
            ok &= before < start
            self._last_end[row_ids] = index.last_end[row_ids]
        self.num_valid -= int(np.count_nonzero(self._valid[gone]))
        self._valid[gone] = False
        self._set(gone, np.zeros(len(gone)))
        new = (base + start % length).T[ok.T]  # time-major: a heap's insert order, as on_add
        self._valid[new] = True
        if len(self._priority):
            self._priority[new] = self.max_priority
        self.num_valid += len(new)
        value = (self.max_priority + self.epsilon) ** self.priority_exponent
        self._set(new, np.full(len(new), value))

    def on_end_episodes(self, rows: np.ndarray) -> None:
        """Windows of later writes to ``rows`` start after the newly ended episode."""
        self._last_end[rows] = self.index.last_end[rows]

    def on_remove(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Zeroes the removed windows (each keyed by its first step's slot)."""
        self._drawn = None
        keys = np.unique(rows * self._length + times % self._length)
        keys = keys[self._valid[keys]]
        self.num_valid -= len(keys)
        self._valid[keys] = False
        if len(self._priority):
            self._priority[keys] = 0.0
        self._set(keys, np.zeros(len(keys)))

    def on_clear(self) -> None:
        self._drawn = None
        self._tree.clear()
        self._valid[:] = False
        self.num_valid = 0
        self._last_end = self.index.last_end.copy()
