"""The smallest positive leaf of a :class:`~recollect.samplers.sum_tree.SumTree`
(``track_min=True``, :attr:`SumTree.min`, for buffer-wide importance weights): a
collaborator the tree holds and tells of every set.

It is one number kept with the count of leaves
holding it, not a min tree: a set that writes a smaller value lowers it at
once; one that moves leaves off it (raised or zeroed) lowers the count, and
when the count reaches 0 the minimum is marked stale and rescanned from the
leaves at the next read (~0.5 ms for 1M leaves; so reading :attr:`min` may
write: the table's lock serialises it with sets). It is exact: comparisons
only, no float arithmetic. Per set of 256 the bookkeeping is a gather of
the old values (none when the caller has them: a PER update of the drawn
windows hands the search's) and a few [K] comparisons (~3-5 us for 1M leaves,
against ~25 us for min levels beside the sums, whose [K, B] block reductions
were +11% of the W3 learner step). A rescan needs the last leaf holding the minimum to
move: a draw hits it with probability ``P_min <= 1 / N``, so in PER (updates
of the drawn windows) rescans cost ~``K * P_min * N <= K`` leaf reads per step
on average (< 1 us), and a ring overwrites it once per ``N`` adds. Measured:
1 to 40 rescans per 5,000 W3 steps (+ adds) at 10k and 100k leaves. A caller
that raises the minimum leaf before every read pays a rescan per read.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["TreeMinimum"]


class TreeMinimum:
    """The smallest positive value of a float64 leaf array, kept after every set.

    Args:
        leaves: the tree's float64 leaf level (read, never written; padding zeros are
            not positive and so never the minimum).
    """

    def __init__(self, leaves: np.ndarray) -> None:
        self._leaves = leaves
        # the smallest positive leaf (inf if none) and how many leaves hold it; exact
        # unless _stale (the last of them rose or was zeroed): then rescanned when read
        self._min, self._count, self._stale = math.inf, 0, False

    @property
    def value(self) -> float:
        """The smallest positive leaf (``inf`` when none); may rescan (see the module)."""
        if self._stale:
            self.rescan()
        return self._min

    def reset(self) -> None:
        """Forgets the minimum: every leaf is zero."""
        self._min, self._count, self._stale = math.inf, 0, False

    def note(self, indices: np.ndarray, old: np.ndarray, final: np.ndarray) -> None:
        """Keeps :attr:`value` after leaves ``indices`` went from ``old`` to ``final`` (both
        ``[K]``, per position: a repeated index has the same old and final value at each)."""
        smallest = float(_reduce_min(final))
        if smallest <= 0:  # zeroed leaves (a priority update with epsilon > 0 has none)
            smallest = float(np.where(final > 0, final, np.inf).min())
        if smallest < self._min:  # below every other leaf, stale or not: the new minimum
            self._min, self._stale = smallest, False
            self._count = _distinct(indices[final == smallest])
            return
        if self._stale:  # the minimum is rescanned when read; a lower value set it above
            return
        m = self._min
        if smallest > m and _reduce_min(old) > m:  # no leaf reached or left the minimum (one pass)
            return
        was = old == m
        if smallest == m:  # leaves that took the minimum's value
            self._count += _distinct(indices[(final == m) & ~was])
        if was.any():  # leaves that held the minimum and left it
            self._count -= _distinct(indices[was & (final != m)])
            if self._count <= 0:
                self._stale = True

    def rescan(self) -> None:
        """Recomputes :attr:`value` and its count from the leaves (after the last minimum leaf
        rose or was zeroed): one pass in chunks of ``_SCAN`` leaves, each viewed as uint64
        minus 1, so that 0.0 wraps to the largest integer and positive floats keep their
        order (a non-negative float64 orders like its bits), without a float mask."""
        bits = self._leaves.view(np.uint64)
        chunk = np.empty(min(len(bits), _SCAN), np.uint64)
        best, count = _INF_BITS_MINUS_ONE, 0
        for start in range(0, len(bits), _SCAN):
            shifted = np.subtract(bits[start : start + _SCAN], _ONE, out=chunk[: len(bits) - start])
            low = shifted.min()
            if low < best:
                best, count = low, 0
            if low == best:
                count += int(np.count_nonzero(shifted == low))
        self._stale = False
        if best >= _INF_BITS_MINUS_ONE:  # no positive finite leaf (-0.0 lands here too)
            self._min, self._count = math.inf, 0
        else:
            self._min = float(np.array(best + _ONE, np.uint64).view(np.float64))
            self._count = count


_reduce_min = np.minimum.reduce  # no ndarray.min wrapper (a Python frame)
_SCAN = 1 << 16  # leaves per chunk of a min rescan (512 KiB of uint64: stays in cache)
_ONE = np.uint64(1)
_INF_BITS_MINUS_ONE = np.uint64(0x7FF0000000000000 - 1)  # inf's bits minus 1: 0.0 and -0.0
# minus 1 are above it, every positive finite float below


def _distinct(indices: np.ndarray) -> int:
    """Number of distinct entries of a (usually empty or one-entry) int array."""
    return len(indices) if len(indices) < 2 else len(np.unique(indices))
