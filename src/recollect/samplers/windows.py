"""Valid-window bookkeeping, this module's one responsibility: which windows may be sampled.

Every env row has its own clock: ``t[r]`` counts the steps written to row
``r`` (``add_batch`` advances every row, ``add_batch(..., rows=...)`` only the
listed ones). Row ``r`` stores the steps ``[lo[r], hi[r])`` with
``hi = t`` and ``lo = max(t_clear, t - max_length)``. A window of ``n`` steps
starting at ``s`` is valid when ``lo[r] <= s`` and ``s + n <= hi[r]`` and, in
episode-aware mode, no step but its last has ``is_last``.

Validity is decided by construction (no resample-until-valid loop): episode
ends are logged per row at write time, in a ring of end times per row. The
ring grows with the ends actually stored (it starts at ``_MIN_ENDS`` slots per
row and doubles, up to ``max_length``: a row never stores more ends than
steps), so a buffer of long episodes, or without episodes, spends almost no
memory on it (8 B per stored end, not per stored step). The valid starts of a row are a
union of segments, one per logged episode end plus one open segment at the
head of each row::

    segment after end e_prev, up to end e:  starts [max(lo, e_prev + 1), e - n + 1]
    open segment of row r:                  starts [max(lo, last_end[r] + 1), hi - n]

Removed windows (a table's ``max_times_sampled``) split these segments: each
row has a ``floor`` (every start below it is removed; FIFO consumption only
moves it) and a sorted array of other removed start times, each of which cuts
its segment in two. So a removed window is never drawn, by construction.

A uniform draw over all valid windows is a draw over the concatenated
segments: ``searchsorted`` on the cumulative segment sizes. Building the
segment table costs O(episode ends stored + num_envs) and is cached until the
next write.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["Segments", "WindowIndex"]

_EMPTY = np.empty(0, np.int64)
_KEY_SHIFT = 42  # removed windows are keyed row << 42 | start time (times < 2**40)
_MIN_ENDS = 4  # initial slots per row of the episode-end ring


@dataclasses.dataclass(frozen=True)
class Segments:
    """Valid window starts of one window length, as runs ``[start, start + count)`` per row.

    Attributes:
        rows: int64 ``[S]`` env row of each segment.
        starts: int64 ``[S]`` first valid start time of each segment.
        counts: int64 ``[S]`` number of valid starts (all > 0).
        cumulative: int64 ``[S]`` inclusive cumulative sum of ``counts``.
    """

    rows: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    cumulative: np.ndarray

    @property
    def total(self) -> int:
        """Number of valid windows."""
        return int(self.cumulative[-1]) if len(self.cumulative) else 0

    def locate(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Maps ranks in ``[0, total)`` to ``(rows, start times)`` of the valid windows."""
        seg = np.searchsorted(self.cumulative, ranks, side="right")
        times = self.starts[seg] + (ranks - (self.cumulative[seg] - self.counts[seg]))
        return self.rows[seg], times

    def enumerate(self) -> tuple[np.ndarray, np.ndarray]:
        """All valid ``(rows, start times)``, ordered by start time, then row."""
        rows, times = self.locate(np.arange(self.total, dtype=np.int64))
        order = np.lexsort((rows, times))
        return rows[order], times[order]


class WindowIndex:
    """Per-row step clocks and episode-end logs of a table's env rows.

    Args:
        num_envs: number of env rows.
        max_length: slots per row (``capacity // num_envs``).

    Attributes:
        t: int64 ``[num_envs]`` the next step time of each row (steps written so far).
        t_clear: int64 ``[num_envs]`` each row's clock at the last :meth:`clear`.
        last_end: int64 ``[num_envs]`` time of each row's newest ``is_last`` step, -1 if none.
        generation: int, counts writes and clears (a cheap "did anything change" check).
        removed: windows removed so far by :meth:`remove` (newly removed start times).
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self.num_envs = num_envs
        self.max_length = max_length
        # t = _offsets + _base: a write to every row bumps the Python int _base only
        self._offsets = np.zeros(num_envs, np.int64)
        self._base = 0
        self.t_clear = np.zeros(num_envs, np.int64)
        self._rows = np.arange(num_envs, dtype=np.int64)
        self._no_ends = bytes(num_envs)  # the raw bytes of a bool [num_envs] without an end
        #: int64 ``[num_envs]`` 0..num_envs-1 (read-only use)
        self.all_rows = self._rows
        # per-row ring of end times: end number j of row r at [r, j % width], j in
        # [_end_start[r], _end_n[r]); grows (see _reserve_ends) with the ends stored
        self._ends = np.zeros((num_envs, min(_MIN_ENDS, max_length)), np.int64)
        self.generation = 0
        self.removed = 0
        self.clear()
        self.generation = 0

    @staticmethod
    def estimate_nbytes(num_envs: int, max_length: int) -> int:
        """Bytes an index of that geometry allocates (:attr:`nbytes`), before building it.

        The episode-end log then grows by 8 B per stored episode end (at most
        8 B per stored step, with episodes of one step).
        """
        return 8 * num_envs * (min(_MIN_ENDS, max_length) + 6)

    @property
    def nbytes(self) -> int:
        """Bytes of the clocks and the episode-end log (int64 ``[num_envs, width]``)."""
        arrays = (self._offsets, self.t_clear, self._rows, self._ends)
        small = (self.last_end, self._end_start, self._end_n)
        return sum(a.nbytes for a in arrays) + sum(a.nbytes for a in small)

    # -- counters ---------------------------------------------------------
    @property
    def t(self) -> np.ndarray:
        """int64 ``[num_envs]``: each row's next step time (a new array; read-only use)."""
        return self._offsets + self._base

    @property
    def hi(self) -> np.ndarray:
        """int64 ``[num_envs]``: one past each row's newest stored step time."""
        return self.t

    @property
    def lo(self) -> np.ndarray:
        """int64 ``[num_envs]``: each row's oldest stored step time."""
        return np.maximum(self.t_clear, self.t - self.max_length)

    @property
    def stored(self) -> np.ndarray:
        """int64 ``[num_envs]``: steps currently stored in each row."""
        return self.t - self.lo

    @property
    def num_stored(self) -> int:
        """Steps stored over all rows."""
        return int(self.stored.sum())

    @property
    def uniform(self) -> bool:
        """Whether every row has the same clock and the same stored range."""
        return bool((self.t == self.t[0]).all() and (self.t_clear == self.t_clear[0]).all())

    def clear(self) -> None:
        """Forgets every stored step; clocks (and so ids) keep increasing."""
        self.t_clear = self.t
        self.last_end = np.full(self.num_envs, -1, dtype=np.int64)
        self._end_start = np.zeros(self.num_envs, np.int64)
        self._end_n = np.zeros(self.num_envs, np.int64)
        self._cache: dict[tuple[int, bool], Segments] = {}
        self._removing = False  # any removed window (skips the splitting below when not)
        self._floor = np.zeros(self.num_envs, np.int64)
        self._removed = _EMPTY
        self.generation += 1

    def advance(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        """Records that step ``t[r]`` was written to each row ``r`` of ``rows``.

        Args:
            rows: int64 ``[k]`` distinct rows written, or None for every row.
            is_last: bool ``[k]`` (``[num_envs]`` for ``rows=None``) episode ends, or None.
        """
        # a write of every row without an episode end (the common case) compares raw bytes
        # (~50 ns); anything else counts (np.count_nonzero is ~10x cheaper than .any())
        if (
            is_last is not None
            and (rows is not None or is_last.tobytes() != self._no_ends)
            and np.count_nonzero(is_last)
        ):
            ended = np.flatnonzero(is_last) if rows is None else rows[is_last]
            self._log_ends(ended, self.t[ended])
        if rows is None:
            self._base += 1
        else:
            self._offsets[rows] += 1
        self.generation += 1
        if self._cache:
            self._cache = {}

    def advance_block(
        self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None
    ) -> None:
        """Records ``count`` (<= ``max_length``) consecutive steps written to each row of ``rows``.

        Args:
            rows: int64 ``[k]`` distinct rows, or None for every row.
            count: steps per row.
            is_last: bool ``[k, count]`` (``[num_envs, count]`` for ``rows=None``), or None.
        """
        row_ids = self._rows if rows is None else rows
        if is_last is not None and np.count_nonzero(is_last):
            position, step = np.nonzero(is_last)  # by row position, then time
            ended = row_ids[position]
            times = self.t[ended] + step
            per_row = np.bincount(position, minlength=len(row_ids)).astype(np.int64)
            firsts = np.cumsum(per_row) - per_row
            within = np.arange(len(position)) - np.repeat(firsts, per_row)
            width = self._reserve_ends(row_ids, per_row)
            self._ends[ended, (self._end_n[ended] + within) % width] = times
            n = self._end_n[row_ids] + per_row
            self._end_n[row_ids] = n
            self._end_start[row_ids] = np.maximum(self._end_start[row_ids], n - width)
            has = per_row > 0
            self.last_end[row_ids[has]] = times[(firsts + per_row - 1)[has]]
        if rows is None:
            self._base += count
        else:
            self._offsets[rows] += count
        self.generation += 1
        if self._cache:
            self._cache = {}

    def end_episodes(self, rows: np.ndarray) -> np.ndarray:
        """Ends the episode at the newest stored step of each row of ``rows`` (truncation).

        Windows never cross that step afterwards, so the next step written to a
        row starts a new episode (a replay service does it when a writer's rows
        pass to another writer). Rows that hold no step, or whose newest step
        already ends an episode, are left alone.

        Args:
            rows: int64 ``[k]`` distinct rows.

        Returns:
            int64 ``[m]`` the rows whose episode was ended.
        """
        rows = np.asarray(rows, np.int64)
        last = self.t[rows] - 1
        ended = rows[(last >= self.lo[rows]) & (self.last_end[rows] < last)]
        if len(ended):
            self._log_ends(ended, self.t[ended] - 1)
            self.generation += 1
            if self._cache:
                self._cache = {}
        return ended

    def _log_ends(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Appends one end time to the log of each of the distinct ``rows``."""
        width = self._reserve_ends(rows, np.ones(len(rows), np.int64))
        n = self._end_n[rows]
        self._ends[rows, n % width] = times
        self._end_n[rows] = n + 1
        self._end_start[rows] = np.maximum(self._end_start[rows], n + 1 - width)
        self.last_end[rows] = times

    def _reserve_ends(self, rows: np.ndarray, new: np.ndarray) -> int:
        """Makes room for ``new[i]`` more ends of row ``rows[i]``; returns the ring width.

        At full width (``max_length``) the ring overwrites its oldest ends, which
        are no longer stored by then. Below it, ends no longer stored are dropped
        first; if the live ones still do not leave half the ring free, the ring
        doubles (amortised O(1) per end), keeping every live end.
        """
        width = self._ends.shape[1]
        if width >= self.max_length:
            return width
        needed = int((self._end_n[rows] - self._end_start[rows] + new).max(initial=0))
        if needed <= width:
            return width
        self.live_ends()  # drops the dead ends (advances _end_start)
        needed = int((self._end_n[rows] - self._end_start[rows] + new).max(initial=0))
        live = int((self._end_n - self._end_start).max(initial=0))
        if max(needed, 2 * live) <= width:
            return width
        return self._resize_ends(min(self.max_length, max(2 * width, needed, 2 * live)))

    def _resize_ends(self, width: int) -> int:
        """Moves the live ends into a ring of ``width`` slots per row; returns ``width``."""
        counts = self._end_n - self._end_start
        rows = np.repeat(self._rows, counts)
        firsts = np.cumsum(counts) - counts
        j = np.repeat(self._end_start, counts) + np.arange(len(rows)) - np.repeat(firsts, counts)
        ends = np.zeros((self.num_envs, width), np.int64)
        ends[rows, j % width] = self._ends[rows, j % self._ends.shape[1]]
        self._ends = ends
        return width

    # -- removed windows --------------------------------------------------
    def remove(self, rows: np.ndarray, times: np.ndarray) -> int:
        """Makes the windows starting at ``(rows, times)`` unsampleable (any window length).

        Returns:
            How many of them were not removed already.
        """
        keys = np.unique((np.asarray(rows, np.int64) << _KEY_SHIFT) | np.asarray(times, np.int64))
        key_rows, key_times = keys >> _KEY_SHIFT, keys & ((1 << _KEY_SHIFT) - 1)
        keys = keys[key_times >= np.maximum(self._floor, self.lo)[key_rows]]
        new = keys[~np.isin(keys, self._removed, assume_unique=True)]
        if not len(new):
            return 0
        self._removing = True
        self._removed = np.union1d(self._removed, new)
        self._compact()
        self._cache = {}
        self.removed += len(new)
        return len(new)

    def is_removed(self, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
        """bool ``[K]``: whether the window starting at each ``(rows, times)`` was removed
        (:meth:`remove`); ``rows`` must be valid rows."""
        rows, times = np.asarray(rows, np.int64), np.asarray(times, np.int64)
        out = times < self._floor[rows]
        if len(self._removed):
            keys = (rows << _KEY_SHIFT) | times
            at = np.minimum(np.searchsorted(self._removed, keys), len(self._removed) - 1)
            out |= self._removed[at] == keys
        return out

    def _compact(self) -> None:
        """Drops removed starts no longer stored; moves each row's leading run into its floor."""
        floor = np.maximum(self._floor, self.lo)
        removed = self._removed
        rows, times = removed >> _KEY_SHIFT, removed & ((1 << _KEY_SHIFT) - 1)
        alive = times >= floor[rows]
        removed, rows, times = removed[alive], rows[alive], times[alive]
        counts = np.bincount(rows, minlength=self.num_envs)
        rank = np.arange(len(rows)) - (np.cumsum(counts) - counts)[rows]
        lead = times - floor[rows] == rank  # t_i - i is nondecreasing: the leads are a prefix
        run = np.bincount(rows[lead], minlength=self.num_envs)
        self._floor = np.where(run > 0, floor + run, self._floor)
        self._removed = removed[~lead]

    def _split_removed(
        self, rows: np.ndarray, starts: np.ndarray, counts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Segments without the removed starts: floors cut heads, removed starts split."""
        cut = np.clip(self._floor[rows] - starts, 0, None)
        starts, counts = starts + cut, counts - cut
        removed = self._removed
        if not len(removed):
            return rows, starts, counts
        base = rows << _KEY_SHIFT
        first = np.searchsorted(removed, base | starts)
        m = np.searchsorted(removed, base | np.maximum(starts + counts, starts)) - first
        if not m.any():
            return rows, starts, counts
        pieces = m + 1
        seg = np.repeat(np.arange(len(rows)), pieces)
        j = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        cut_times = removed & ((1 << _KEY_SHIFT) - 1)
        at = first[seg] + j
        last = len(removed) - 1
        lo = np.where(j == 0, starts[seg], cut_times[np.clip(at - 1, 0, last)] + 1)
        end = starts[seg] + counts[seg]
        hi = np.where(j == m[seg], end, cut_times[np.clip(at, 0, last)])
        return rows[seg], lo, hi - lo

    # -- episode ends -----------------------------------------------------
    def live_ends(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Logged episode ends still stored: ``(rows, times, previous end times)``, by row.

        The previous end of a row's oldest live end may be older than ``lo``
        (or -1): segments start at ``max(lo, previous end + 1)`` anyway.
        """
        counts = self._end_n - self._end_start
        total = int(counts.sum())
        if total == 0:
            return _EMPTY, _EMPTY, _EMPTY
        rows = np.repeat(self._rows, counts)
        firsts = np.cumsum(counts) - counts
        offsets = np.arange(total) - np.repeat(firsts, counts)
        width = self._ends.shape[1]
        times = self._ends[rows, (np.repeat(self._end_start, counts) + offsets) % width]
        prev = np.empty(total, np.int64)
        prev[1:] = times[:-1]
        prev[firsts[counts > 0]] = -1
        alive = times >= self.lo[rows]
        if alive.all():
            return rows, times, prev
        # ends die oldest first within a row: drop each row's dead prefix for good
        self._end_start += np.bincount(rows[~alive], minlength=self.num_envs)
        return rows[alive], times[alive], prev[alive]

    def set_ends(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Replaces the episode-end log by the ends ``(rows, times)`` (any order)."""
        rows, times = np.asarray(rows, np.int64), np.asarray(times, np.int64)
        order = np.lexsort((times, rows))
        rows, times = rows[order], times[order]
        counts = np.bincount(rows, minlength=self.num_envs).astype(np.int64)
        offsets = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        most = int(counts.max(initial=0))
        width = min(_MIN_ENDS, self.max_length)
        while width < min(most, self.max_length):
            width *= 2
        width = min(width, self.max_length)
        self._ends = np.zeros((self.num_envs, width), np.int64)
        self._ends[rows, offsets % width] = times
        self._end_start = np.maximum(counts - width, 0)
        self._end_n = counts
        self.last_end = np.full(self.num_envs, -1, dtype=np.int64)
        self.last_end[rows] = times  # the last assignment per row wins (time order)
        self._cache = {}

    # -- state --------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Clocks and live episode ends (int64 arrays), enough to restore the index exactly."""
        rows, times, _ = self.live_ends()
        state = {
            "t": self.t.copy(),
            "t_clear": self.t_clear.copy(),
            "end_rows": rows.copy(),
            "end_times": times.copy(),
        }
        if self._removing:
            state["removed_floor"] = self._floor.copy()
            state["removed_keys"] = self._removed.copy()
        return state

    @staticmethod
    def cleared_state(state: dict[str, Any], t_clear: np.ndarray) -> dict[str, Any]:
        """:meth:`state_dict` output ``state`` with the steps before ``t_clear`` (int64
        ``[num_envs]``, per row) cleared: a memmap reopen drops the steps overwritten after
        its last flush this way."""
        return {**state, "t_clear": np.asarray(t_clear, np.int64)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (also of format 1, without episode ends).

        Raises:
            ValueError: arrays of another number of rows, or inconsistent clocks.
        """
        t = np.asarray(state["t"], np.int64).reshape(-1)
        t_clear = np.asarray(state["t_clear"], np.int64).reshape(-1)
        if t.shape != (self.num_envs,) or t_clear.shape != t.shape or (t_clear > t).any():
            raise ValueError(
                f"index state has clocks of shape {t.shape} (t_clear {t_clear.shape}); this "
                f"table has {self.num_envs} rows, and t_clear must be <= t."
            )
        self._offsets, self._base, self.t_clear = t.copy(), 0, t_clear.copy()
        self.generation += 1
        # format-1 states have no episode ends: the owner rebuilds them from its is_last leaf
        self.set_ends(state.get("end_rows", _EMPTY), state.get("end_times", _EMPTY))
        floor = state.get("removed_floor")
        self._removing = floor is not None
        self._floor = np.zeros(self.num_envs, np.int64)
        self._removed = _EMPTY
        if floor is not None:
            self._floor[:] = np.asarray(floor, np.int64).reshape(-1)
            self._removed = np.sort(np.asarray(state["removed_keys"], np.int64).reshape(-1))

    # -- valid windows ----------------------------------------------------
    def segments(self, num_steps: int, within_episode: bool) -> Segments:
        """Valid starts of ``num_steps`` windows (cached until the next write)."""
        key = (num_steps, within_episode)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        lo, hi = self.lo, self.hi
        rows = self._rows
        if within_episode:
            end_rows, end_t, end_prev = self.live_ends()
            rows = np.concatenate([end_rows, rows])
            starts = np.maximum(np.concatenate([end_prev, self.last_end]) + 1, lo[rows])
            lasts = np.concatenate([end_t - num_steps + 1, hi - num_steps])
        else:
            starts = lo
            lasts = hi - num_steps
        counts = lasts - starts + 1
        if self._removing:
            rows, starts, counts = self._split_removed(rows, starts, np.maximum(counts, 0))
        keep = counts > 0
        if not keep.all():
            rows, starts, counts = rows[keep], starts[keep], counts[keep]
        result = Segments(rows, starts, counts, np.cumsum(counts))
        self._cache[key] = result
        return result

    def count(self, num_steps: int, within_episode: bool) -> int:
        """Number of valid windows of ``num_steps``."""
        return self.segments(num_steps, within_episode).total

    def longest_run(self) -> int:
        """Longest run of stored steps of one row that no window boundary cuts (episode part)."""
        seg = self.segments(1, True)
        if not len(seg.counts):
            return 0
        # A 1-step segment run equals an episode part; windows may end on is_last.
        return int(seg.counts.max())

    def stale(self, rows: np.ndarray, times: np.ndarray) -> bool:
        """Whether any step ``(rows, times)`` is no longer stored (overwritten or cleared)."""
        return bool(len(times)) and bool((times < self.lo[rows]).any())
