"""Which windows of a prioritized sampler hold a sampling value: the table's write
hooks of :class:`~recollect.Prioritized` (and the heaps built on it), kept by a
:class:`WindowValues` the sampler builds at ``bind``.

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

from collections.abc import Callable

import numpy as np

from recollect.samplers.sum_tree import SumTree
from recollect.samplers.windows import WindowIndex

__all__ = ["WindowValues"]


class WindowValues:
    """The sum tree, validity bits and count of valid windows of a prioritized sampler,
    kept as the table writes (its ``on_add``, ``on_add_block``, ``on_end_episodes``,
    ``on_remove`` and ``on_clear`` hooks delegate here).

    Args:
        index: the table's window index (clocks, clear times, episode ends).
        sequence_length: the fixed window length (>= 1, <= ``index.max_length``).
        tree: the sum tree of ``index.num_envs * index.max_length`` leaves.
        keep_raw: keep the raw priority of every slot (``alpha == 0``: the tree's values
            cannot give them back).
        on_set: called with ``(keys, values)`` after every change of sampling values (raw
            priorities already stored; heaps keep their order), or None.
    """

    def __init__(
        self,
        index: WindowIndex,
        sequence_length: int,
        tree: SumTree,
        *,
        keep_raw: bool,
        on_set: Callable[[np.ndarray, np.ndarray], None] | None = None,
    ) -> None:
        self.index = index
        self.sequence_length = sequence_length
        self.tree = tree
        self.on_set = on_set
        #: slots per row (``index.max_length``)
        self.length = index.max_length
        size = index.num_envs * index.max_length
        #: bool ``[size]``: whether the window keyed by each slot is valid (see start_times)
        self.valid = np.zeros(size, bool)
        #: float64 raw priorities ``[size]`` (``keep_raw``), else ``[0]``
        self.priority = np.zeros(size if keep_raw else 0, np.float64)
        self.num_valid = 0
        self.all_rows = np.arange(index.num_envs, dtype=np.int64)
        #: int64 ``[num_envs]``: ``row * max_length``
        self.row_base = self.all_rows * index.max_length
        #: int64 ``[num_envs]``: the last episode end the windows saw
        self.last_end = index.last_end.copy()
        # t - max_length of every row (the oldest stored time), kept for one index generation
        self._oldest, self._oldest_generation = np.zeros(0, np.int64), -1

    @property
    def nbytes(self) -> int:
        """Bytes of the tree and the per-slot and per-row arrays."""
        arrays = (self.valid, self.priority, self.all_rows, self.row_base, self.last_end)
        return self.tree.nbytes + sum(a.nbytes for a in arrays)

    def start_times(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, start times)`` of the valid windows keyed by ``keys``.

        The window keyed by slot ``k`` of row ``r`` starts at the one time
        ``s = k (mod max_length)`` in ``[t[r] - max_length, t[r])``: a window
        whose first step was overwritten is no longer valid.
        """
        rows = keys // self.length
        index = self.index
        if self._oldest_generation != index.generation:  # t changes only with a write
            self._oldest, self._oldest_generation = index.t - self.length, index.generation
        oldest = self._oldest[rows]  # may be < 0: the modulo keeps s >= 0
        # keys - oldest = rows * max_length + (slots - oldest): the same residue
        return rows, oldest + (keys - oldest) % self.length

    def set(
        self,
        keys: np.ndarray,
        values: np.ndarray,
        old: np.ndarray | None = None,
        parents: list[np.ndarray] | None = None,
    ) -> None:
        """Sets the sampling values of ``keys`` in the sum tree (and its minimum); ``old``
        and ``parents``: their current values and nodes, when the caller has them (a
        search's; see :meth:`SumTree.set`)."""
        self.tree.set(keys, values, old, parents)
        if self.on_set is not None:
            self.on_set(keys, values)

    def add(
        self, rows: np.ndarray | None, is_last: np.ndarray | None, priority: float, value: float
    ) -> None:
        """Zeroes the windows whose first step was just overwritten; scores the new windows
        (raw ``priority``, sampling value ``value``)."""
        index, n = self.index, self.sequence_length
        # lo = max(t_clear, t - max_length) and n <= max_length: only t_clear can cut the window
        where: slice | np.ndarray
        if rows is None:  # every row: whole arrays, no fancy indexing
            t, base, cleared = index.t, self.row_base, index.t_clear
            last_end, where = self.last_end, slice(None)
        else:
            where = rows
            t, base, cleared = index.t[rows], self.row_base[rows], index.t_clear[rows]
            last_end = self.last_end[rows]
        # step t - 1 was just written to each row
        gone = base + (t - 1) % self.length
        start = t - n
        ok = start >= cleared
        if is_last is not None:
            ok &= last_end < start  # no episode end before the window's last step
            self.last_end[where] = index.last_end[where]
        self.num_valid -= int(np.count_nonzero(self.valid[gone]))
        self.valid[gone] = False
        if n == 1:  # the new window is keyed by the overwritten slot: set each key once
            self.valid[gone[ok]] = True
            if len(self.priority):
                self.priority[gone[ok]] = priority
            self.num_valid += int(np.count_nonzero(ok))
            self.set(gone, np.where(ok, value, 0.0))
            return
        new = (base + start % self.length)[ok]
        self.valid[new] = True
        if len(self.priority):
            self.priority[new] = priority
        self.num_valid += len(new)
        values = np.concatenate([np.zeros(len(gone)), np.full(len(new), value)])
        self.set(np.concatenate([gone, new]), values)

    def add_block(
        self,
        rows: np.ndarray | None,
        count: int,
        is_last: np.ndarray | None,
        priority: float,
        value: float,
    ) -> None:
        """:meth:`add` of ``count`` (<= ``max_length``) steps per row, in one pass.

        Equals ``count`` calls of :meth:`add`: every overwritten slot loses its
        window, then every window completed by the block is scored, except those
        crossing an episode end, cleared, or whose first step the block overwrote.
        """
        index, n, length = self.index, self.sequence_length, self.length
        row_ids = self.all_rows if rows is None else rows
        t = index.t[row_ids]  # after the block
        times = (t - count)[:, None] + np.arange(count)  # [k, count] the written times
        base = self.row_base[row_ids][:, None]
        gone = (base + times % length).reshape(-1)
        start = times - (n - 1)  # the window each written step completes
        ok = (start >= index.t_clear[row_ids][:, None]) & (start >= (t - length)[:, None])
        if is_last is not None:  # the newest end before each written step
            ends = np.where(is_last, times, -1)
            before = np.empty_like(ends)
            before[:, 0] = self.last_end[row_ids]
            np.maximum.accumulate(ends[:, :-1], axis=1, out=before[:, 1:])
            np.maximum(before[:, 1:], before[:, :1], out=before[:, 1:])
            ok &= before < start
            self.last_end[row_ids] = index.last_end[row_ids]
        self.num_valid -= int(np.count_nonzero(self.valid[gone]))
        self.valid[gone] = False
        self.set(gone, np.zeros(len(gone)))
        new = (base + start % length).T[ok.T]  # time-major: a heap's insert order, as add
        self.valid[new] = True
        if len(self.priority):
            self.priority[new] = priority
        self.num_valid += len(new)
        self.set(new, np.full(len(new), value))

    def end_episodes(self, rows: np.ndarray) -> None:
        """Windows of later writes to ``rows`` start after the newly ended episode."""
        self.last_end[rows] = self.index.last_end[rows]

    def remove(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Zeroes the removed windows (each keyed by its first step's slot)."""
        self._unset(np.unique(rows * self.length + times % self.length))

    def drop_before(self, times: np.ndarray) -> None:
        """Zeroes the windows of each row ``r`` that start before ``times[r]`` (int64
        ``[num_envs]``)."""
        keys = np.flatnonzero(self.valid)
        rows, start = self.start_times(keys)
        self._unset(keys[start < times[rows]])

    def _unset(self, keys: np.ndarray) -> None:
        """Zeroes the windows keyed by ``keys`` (unique) that are valid."""
        keys = keys[self.valid[keys]]
        self.num_valid -= len(keys)
        self.valid[keys] = False
        if len(self.priority):
            self.priority[keys] = 0.0
        self.set(keys, np.zeros(len(keys)))

    def clear(self) -> None:
        """Every window loses its value (the table forgot its steps)."""
        self.tree.clear()
        self.valid[:] = False
        self.num_valid = 0
        self.last_end = self.index.last_end.copy()
