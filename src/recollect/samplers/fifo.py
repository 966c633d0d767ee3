"""FIFO and LIFO samplers (Reverb's ``Fifo`` / ``Lifo`` selectors): deterministic order.

Valid windows are totally ordered by ``(start time, env row)`` ("time-then-row"
order; the order of :meth:`Segments.enumerate`). Each row keeps its own clock,
so within a row the order is always oldest first; rows written at the same
pace (``add_batch`` without ``rows``) interleave by time, then row.

* :class:`Fifo` returns the ``batch_size`` *first* windows of that order: the
  oldest window first; windows of the same start time by ascending row.
* :class:`Lifo` returns the ``batch_size`` *last* windows, newest first: the
  exact reverse order (descending time, then descending row).

Sampling does not remove anything (removal is the ring's or a table's
business), so repeated calls without writes return the same batch. When fewer
than ``batch_size`` windows are valid, the ``N`` valid ones repeat cyclically
in the same order (``ranks = arange(batch_size) % N``). Probabilities are 1.0
(the choice is not random) and no ``rng`` draw is consumed.

Cost: O(S log max_length) for ``S`` valid-window segments plus
O(batch_size + num_envs); never a pass over all stored windows.
"""

from __future__ import annotations

import numpy as np

from recollect.samplers.base import Sampler, WindowDraw
from recollect.samplers.windows import Segments

__all__ = ["Fifo", "Lifo"]


def _count_upto(seg: Segments, time: int) -> int:
    """Valid windows whose start time is <= ``time``."""
    return int(np.clip(time - seg.starts + 1, 0, seg.counts).sum())


def _first_windows(seg: Segments, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` (<= total) first windows in time-then-row order."""
    lo_t, hi_t = int(seg.starts.min()), int((seg.starts + seg.counts).max()) - 1
    while lo_t < hi_t:  # smallest time T with count_upto(T) >= k (binary search over time)
        mid = (lo_t + hi_t) // 2
        if _count_upto(seg, mid) >= k:
            hi_t = mid
        else:
            lo_t = mid + 1
    counts = np.clip(lo_t - seg.starts + 1, 0, seg.counts)
    rows = np.repeat(seg.rows, counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    times = np.repeat(seg.starts, counts) + offsets
    order = np.lexsort((rows, times))[:k]
    return rows[order], times[order]


def _last_windows(seg: Segments, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` (<= total) last windows in time-then-row order, newest first."""
    ends = seg.starts + seg.counts - 1
    lo_t, hi_t = int(seg.starts.min()), int(ends.max())
    while lo_t < hi_t:  # largest time T with count_from(T) >= k
        mid = (lo_t + hi_t + 1) // 2
        if int(np.clip(ends - mid + 1, 0, seg.counts).sum()) >= k:
            lo_t = mid
        else:
            hi_t = mid - 1
    counts = np.clip(ends - lo_t + 1, 0, seg.counts)
    rows = np.repeat(seg.rows, counts)
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    times = np.repeat(ends, counts) - offsets
    order = np.lexsort((-rows, -times))[:k]
    return rows[order], times[order]


class _Ordered(Sampler):
    """Shared ``_draw`` of :class:`Fifo` and :class:`Lifo`; each defines ``_pick``."""

    deterministic = True

    def _pick(self, seg: Segments, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, times)`` int64 ``[k]`` of the ``k`` windows this order returns first."""
        raise NotImplementedError

    def _draw(self, seg: Segments, batch_size: int, rng: np.random.Generator) -> WindowDraw:
        k = min(batch_size, seg.total)
        rows, times = self._pick(seg, k)
        if k < batch_size:
            ranks = np.arange(batch_size) % k
            rows, times = rows[ranks], times[ranks]
        return WindowDraw(rows, times, np.ones(batch_size), table_size=seg.total)


class Fifo(_Ordered):
    """Oldest valid windows first (time-then-row order); deterministic, see module doc."""

    def _pick(self, seg: Segments, k: int) -> tuple[np.ndarray, np.ndarray]:
        return _first_windows(seg, k)


class Lifo(_Ordered):
    """Newest valid windows first (reverse time-then-row order); deterministic, see module doc."""

    def _pick(self, seg: Segments, k: int) -> tuple[np.ndarray, np.ndarray]:
        return _last_windows(seg, k)
