"""The geometry of a :class:`~recollect.samplers.sum_tree.SumTree`: the size of every
level, which small levels keep their prefix sums, and the popcount table of the search
(the module docstring of :mod:`~recollect.samplers.sum_tree` describes their use).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["level_sizes", "search_sizes"]


def _child_table(b: int) -> np.ndarray | None:
    """``count - 1`` of every popcount pair that ``find`` views as one uint8 (b = 8) or
    uint16 (b = 16; the counts c0 + 256 c1), or None: rows are summed."""
    if _bitwise_count is None or b not in (8, 16):
        return None
    if b == 8:
        return np.arange(-1, 8, dtype=np.int64)
    pairs = np.arange(8 * 256 + 9, dtype=np.int64)
    return (pairs & 255) + (pairs >> 8) - 1


_bitwise_count: Any = getattr(np, "bitwise_count", None)  # numpy >= 2.0


_KEPT_BLOCKS = 512  # levels of at most this many blocks keep their prefix sums (a write
# makes their one product stale: ~3 us at 16 x 256 + 16 + 1 blocks, about a level's search)


def _kept_from(sizes: list[int], b: int) -> int:
    """The first level (above the leaves) of :func:`search_sizes` ``sizes`` whose prefix sums
    :class:`SumTree` keeps: it and every level above have <= ``_KEPT_BLOCKS`` blocks."""
    kept = len(sizes) - 1  # the root
    while kept > 1 and sum(sizes[kept - 1 :]) // b <= _KEPT_BLOCKS:
        kept -= 1
    return kept


def search_sizes(capacity: int, b: int) -> list[int]:
    """Entries of each level of a :class:`SumTree`, leaves first, then the root: the levels
    of :func:`level_sizes` with the top padded to ``r`` full blocks, every level below it
    padded likewise (``r * b^(depth + 1 - i)`` entries) and a root of ``r <= b`` block sums
    (stored in ``b`` entries)."""
    sizes = level_sizes(capacity, b)
    r = -(-sizes[-1] // b)
    depth = len(sizes)
    return [r * b ** (depth - i) for i in range(depth)] + [b]


def level_sizes(capacity: int, b: int) -> list[int]:
    """Entries of each level, leaves first: level i holds top * b^(depth - i) entries."""
    top, depth = capacity, 0
    while top > b * b:  # too big to be the top: add a level of block sums
        top, depth = -(-top // b), depth + 1
    return [top * b ** (depth - i) for i in range(depth + 1)]
