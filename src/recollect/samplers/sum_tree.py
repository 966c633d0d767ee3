"""A vectorized float64 sum tree: batch set, batch prefix-sum search, total.

The tree is ``B``-ary (``branching``, default 16) rather than binary, so a
million leaves need only a few levels and every batch operation is a handful
of numpy calls per level, never a Python loop over items::

    levels[0]        leaves, padded with zeros to r * B^depth entries
    levels[i + 1]    sums of blocks of B entries of levels[i]
    levels[-2]       the top: r full blocks (r <= B; its first entries are those
                     of :func:`level_sizes`' top, and the total sums them)
    levels[-1]       the root: the r block sums of the top (stored in B entries)

Search (``find``) counts, for every query, the root's exclusive prefix sums
<= the query with one ``[B, Q]`` compare and a column sum (no branchy
``searchsorted``), then descends: at each level it takes the exclusive prefix
sums of the ``B`` children of every query's node as one ``[Q, B]`` block and
moves to the last child whose prefix is <= the query. The prefix sums of a
block are one small matrix product (``block @ strict upper triangle of ones``;
a BLAS call is ~4x faster than ``np.cumsum(axis=1)`` here). The small levels
above the leaves (at most ``_KEPT_BLOCKS`` = 512 blocks in all: for 1M leaves
the 4,096 and 256 entries and the root) are views of one array whose prefix
sums the tree keeps: a write marks them stale and the next search recomputes
them all with one product (~3-5 us, less than the per-level product and index
arithmetic it saves), then reads a node's row of them, and the remainder past
the chosen child is the entry at the next node's index. Below them the search
gathers each node's block (of the leaves, for 1M leaves, and the level above)
and multiplies it: for B = 8 or 16 the ``[Q, B]`` bools
are read as uint64 words, popcounted (``np.bitwise_count``, numpy >= 2) and the
1 or 2 counts of a row, read as one integer, index a table of ``count - 1``
(a row ``argmax`` costs ~3x more); other branchings sum the rows. A zero child
has the same prefix as the next one, so it is skipped. Scratch arrays are kept
per batch size (``out=``). Parents are sums of their children (``block @
ones``), recomputed, never updated by deltas, so the total cannot drift; levels
no larger than the batch (the top and the root, for 256 updates of 1M leaves)
are recomputed whole, one product each. :meth:`SumTree.search` also returns the
found leaves' nodes at every level (the descent replaces its node array rather
than updating it in place), so that a set of exactly those leaves (a PER update
of the drawn windows, with the values the search read: ``set(old=, parents=)``)
reads neither their old values nor computes their parents again.

Float round-off between a parent and the sum of its children can, very
rarely, push a query past a block's last positive child; every result is
therefore checked to be a leaf of positive value, and the few that are not are
redone exactly (``np.cumsum`` over the leaves + ``searchsorted``). A leaf of
value zero is never returned while the total is positive; a target at or past
the total (or negative, or NaN: searched as 0) is resolved the same way.

With OpenBLAS here a row of a matrix product is rounded the same whatever the
other rows (tested: the kept sums equal a product of the whole level), so the
kept sums are those a per-search product of two or more gathered rows gives
and the same leaves are found; a single query's product is a vector-matrix one,
which may round differently in the last bit.

Profile (1M leaves, 256 fresh random queries then a set of the 256 found
leaves, CPU time on the 2-core dev machine, loaded): ~93 us for search + set
(with the search's values and nodes handed to the set, as the PER sampler does),
10% less than ~103 us with every level's block gathered and multiplied per
search, in the same process (that was ~128 with a top ``searchsorted`` and a
row ``argmax`` per level: branch misses of random queries, which a benchmark
repeating one batch hides). Every numpy call costs ~1-1.5 us here (cache misses of the 8 MB
leaf level evict numpy's own state), so the search is counted in calls: ~7 at
the root, 8 per kept level, 10 per level below (7 at the leaves) and one
product when stale.

The smallest positive leaf (``track_min=True``, :attr:`SumTree.min`, for
buffer-wide importance weights) is kept exactly beside the sums, with lazy
rescans: :mod:`~recollect.samplers.tree_minimum` describes how and its cost.
The level sizes and the search's tables are :mod:`~recollect.samplers.tree_layout`'s.
"""

from __future__ import annotations

import numpy as np

from recollect.arguments import is_int
from recollect.errors import InvalidArgumentError
from recollect.samplers.tree_layout import (
    _bitwise_count,
    _child_table,
    _kept_from,
    level_sizes,
    search_sizes,
)
from recollect.samplers.tree_minimum import TreeMinimum

__all__ = ["SumTree", "level_sizes", "search_sizes"]


class SumTree:
    """Sums of non-negative float64 leaves with prefix-sum search (and, on request, their
    smallest positive leaf).

    Args:
        capacity: number of leaves (>= 1).
        branching: children per node (>= 2); 16 is fastest for ~1M leaves here.
        track_min: also keep the smallest positive leaf (:attr:`min`; what
            cpprb's and OpenAI baselines' min segment tree give, for buffer-wide
            importance weights), exactly, with lazy rescans (module docstring).

    Example:
        >>> tree = SumTree(4)
        >>> tree.set(np.array([0, 2]), np.array([1.0, 3.0]))
        >>> tree.total, tree.find(np.array([0.5, 1.5])).tolist()
        (4.0, [0, 2])
    """

    def __init__(self, capacity: int, branching: int = 16, *, track_min: bool = False) -> None:
        if not (is_int(capacity, 1) and is_int(branching, 2)):
            raise InvalidArgumentError(
                f"SumTree needs capacity >= 1 and branching >= 2; got capacity={capacity!r}, "
                f"branching={branching!r}."
            )
        self.capacity = int(capacity)
        self.branching = b = int(branching)
        sizes = search_sizes(self.capacity, b)
        # the levels above the leaves of <= _KEPT_BLOCKS blocks (the root included) are
        # views of one array, whose exclusive prefix sums find keeps (one product a write)
        kept = _kept_from(sizes, b)
        small = np.zeros(sum(sizes[kept:]), np.float64)
        ends = np.cumsum(sizes[kept:]).tolist()
        self._levels = [np.zeros(size, np.float64) for size in sizes[:kept]] + [
            small[end - size : end] for size, end in zip(sizes[kept:], ends, strict=True)
        ]  # last: the root
        self._blocks = [level.reshape(-1, b) for level in self._levels[:-1]]
        self._top = level_sizes(self.capacity, b)[-1]  # entries of the old top (the total)
        self._exclusive = np.triu(np.ones((b, b)), 1)  # block @ this = exclusive prefix sums
        self._small = small.reshape(-1, b)
        self._kept = kept
        self._prefix = np.zeros_like(self._small)  # self._small @ _exclusive, when not stale
        self._prefix_stale = False
        self._prefixes = [  # [blocks, b] prefix sums of the kept level i at [i - kept]
            self._prefix[(end - size) // b : end // b]
            for size, end in zip(sizes[kept:], ends, strict=True)
        ]
        self._prefixes_flat = [prefix.reshape(-1) for prefix in self._prefixes]
        self._ones = np.ones(b)
        self._shift = b.bit_length() - 1 if b & (b - 1) == 0 else 0  # log2(b) or 0
        # [b-8k] bools viewed as uint64 -> popcounts (uint8) viewed as one int -> count - 1
        self._child = _child_table(b)
        self._queries: dict[int, tuple[np.ndarray, ...]] = {}  # find's buffers per batch size
        self._total: float | None = 0.0  # the sum of the leaves, None when not yet summed
        self.track_min = bool(track_min)
        self._minimum = TreeMinimum(self._levels[0]) if self.track_min else None

    @staticmethod
    def estimate_nbytes(capacity: int, branching: int = 16, *, track_min: bool = False) -> int:
        """Bytes a tree of ``capacity`` leaves allocates (:attr:`nbytes`), before building it
        (``track_min`` adds none: the minimum is two numbers, its rescan a transient chunk)."""
        b = int(branching)
        table = _child_table(b)
        sizes = search_sizes(int(capacity), b)  # the levels, and the kept prefix sums
        return 8 * (sum(sizes) + sum(sizes[_kept_from(sizes, b) :]) + b * b + b) + (
            0 if table is None else table.nbytes
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the tree's arrays (levels and the small search arrays)."""
        return (
            sum(level.nbytes for level in self._levels)
            + self._prefix.nbytes
            + self._exclusive.nbytes
            + self._ones.nbytes
            + (0 if self._child is None else self._child.nbytes)
        )

    # -- reading ----------------------------------------------------------
    @property
    def values(self) -> np.ndarray:
        """The leaves, float64 ``[capacity]`` (a read-only view)."""
        view = self._levels[0][: self.capacity]
        view.flags.writeable = False
        return view

    @property
    def total(self) -> float:
        """Sum of all leaves (kept until the next write: a draw and the update after it
        read it once)."""
        total = self._total
        if total is None:
            total = self._total = float(np.add.reduce(self._levels[-2][: self._top]))
        return total

    @property
    def min(self) -> float:
        """The smallest positive leaf (``inf`` when none); needs ``track_min=True``.

        Raises:
            ValueError: the tree was built with ``track_min=False``.
        """
        if self._minimum is None:
            raise ValueError("this SumTree keeps no minimum; construct it with track_min=True.")
        return self._minimum.value

    def __getitem__(self, indices: np.ndarray) -> np.ndarray:
        return self._levels[0][indices]

    def find(self, targets: np.ndarray) -> np.ndarray:
        """Leaf index ``i`` with ``cumsum[i - 1] <= target < cumsum[i]`` for every target.

        Args:
            targets: float64 ``[Q]`` in ``[0, total)``; a target at or past the
                total maps to the last leaf of positive value.

        Returns:
            int64 ``[Q]`` leaf indices, each of positive value (when total > 0).
        """
        return self.find_values(targets)[0]

    def find_values(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(find(targets), values of those leaves)``: float64 ``[Q]`` values, read once."""
        targets = np.asarray(targets, dtype=np.float64).reshape(-1)
        return self.search(np.fmax(targets, 0.0), targets, 1.0)[:2]  # a copy; NaN -> 0

    def search(
        self, u: np.ndarray, draws: np.ndarray, scale: float
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray] | None]:
        """:meth:`find_values` of the float64 ``[Q]`` targets ``draws * scale``, given ``u``,
        a float64 ``[Q]`` copy of them that is >= 0 and not NaN: ``u`` is overwritten (a
        sampler's uniform doubles times the total need neither find_values' conversion nor
        its clamp; the targets are only recomputed for the rare exact search).

        Returns:
            ``(leaves, values, parents)``: ``parents[i]``, the node of each target at
            level ``i + 1`` (``leaves // b^(i + 1)``), for a :meth:`set` of exactly these
            leaves; None when some leaf came from the exact search."""
        # ndarray methods and out= buffers: every numpy call costs ~1 us, a dozen per level
        buffers = self._queries.get(len(u))
        if buffers is None:
            buffers = self._buffers(len(u))
        base, block, prefix, le, le_root, words, counts, pairs = buffers
        if self._prefix_stale:  # the small levels' prefix sums, one product
            np.matmul(self._small, self._exclusive, out=self._prefix)
            self._prefix_stale = False
        # the root (<= b entries): counts of exclusive prefixes <= u, one [b, Q] compare
        root_prefix = self._prefixes_flat[-1]
        np.less_equal(root_prefix[:, None], u, out=le_root)
        count = np.add.reduce(le_root.view(np.uint8), axis=0, dtype=np.uint8)
        if len(self._blocks[-1]) < self.branching:  # past the total (round-off): the last
            np.minimum(count, len(self._blocks[-1]), out=count)  # root entry with a subtree
        node = np.subtract(count, 1, dtype=np.int64)
        u -= root_prefix[node]
        flat_prefix, column, b, table = prefix.reshape(-1), u[:, None], self.branching, self._child
        kept, parents = self._kept, [node] * len(self._blocks)
        for i in range(len(self._blocks) - 1, -1, -1):
            parents[i] = node  # kept for set: node is replaced below, not updated in place
            if i >= kept:  # a small level: the node's row of the kept prefix sums
                self._prefixes[i - kept].take(node, axis=0, out=prefix, mode="clip")
            else:  # [Q, B] exclusive sums of the node's children (in range by construction)
                self._blocks[i].take(node, axis=0, out=block, mode="clip")
                np.matmul(block, self._exclusive, out=prefix)
            # the last child whose prefix is <= u (prefix[:, 0] = 0 <= u: count >= 1)
            np.less_equal(prefix, column, out=le)
            if table is None:  # any branching: a row sum
                child = le.sum(axis=1) - 1
            else:  # b = 8 or 16: a popcount per 8 bools; the 1 or 2 counts, read as one
                _bitwise_count(words, out=counts)  # integer, index a table of count - 1
                child = table[pairs]
            if i and i < kept:  # the remainder past the child (the leaves need none)
                u -= flat_prefix[base + child]
            node = node * b
            node += child
            if i >= kept:  # the remainder past the child (its flat index: the next node)
                u -= self._prefixes_flat[i - kept].take(node, mode="clip")
        values = self._levels[0][node]
        if np.count_nonzero(values) < len(values):  # a zero leaf (leaves are >= 0)
            bad = values <= 0
            node[bad] = self._find_exact(draws[bad] * scale)
            return node, self._levels[0][node], None
        return node, values, parents

    def _buffers(self, queries: int) -> tuple[np.ndarray, ...]:
        """find's scratch arrays for ``queries`` targets, and views of them (a few kept; the
        caller holds the table lock, so one find at a time uses them)."""
        b = self.branching
        if len(self._queries) >= 8:
            self._queries.clear()
        le = np.empty((queries, b), bool)
        counts = np.empty((queries, max(1, b // 8)), np.uint8)
        table = self._child is not None
        buffers = self._queries[queries] = (
            np.arange(queries, dtype=np.int64) * b,
            np.empty((queries, b)),
            np.empty((queries, b)),
            le,
            np.empty((b, queries), bool),
            le.view(np.uint64) if table else le,  # the words popcounted
            counts,
            counts.view(np.uint8 if b == 8 else np.uint16)[:, 0] if table else counts,
        )
        return buffers

    def _find_exact(self, targets: np.ndarray) -> np.ndarray:
        """Slow exact search over all leaves (only for round-off stragglers)."""
        leaves = self._levels[0]
        cs = np.cumsum(leaves)
        found = np.searchsorted(cs, targets, side="right")
        positive = np.flatnonzero(leaves > 0)
        last = positive[-1] if len(positive) else 0
        found = np.minimum(found, last)
        return np.where(leaves[found] > 0, found, last)

    # -- writing ----------------------------------------------------------
    def set(
        self,
        indices: np.ndarray,
        values: np.ndarray,
        old: np.ndarray | None = None,
        parents: list[np.ndarray] | None = None,
    ) -> None:
        """Sets leaves ``indices`` to ``values``; with repeated indices the last write wins.

        Args:
            indices: int ``[K]`` leaf indices in ``[0, capacity)``.
            values: float64 ``[K]`` non-negative finite values (not checked here;
                callers validate).
            old: float64 ``[K]`` the leaves' values now (``tree[indices]``, as a
                :meth:`find_values` just returned them), or None: read here (the
                minimum's bookkeeping needs them).
            parents: the :meth:`search` that found exactly ``indices`` returned them
                (their nodes at every level), or None: computed here.
        """
        if type(indices) is not np.ndarray or indices.dtype != np.int64 or indices.ndim != 1:
            indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if type(values) is not np.ndarray or values.dtype != np.float64 or values.ndim != 1:
            values = np.asarray(values, dtype=np.float64).reshape(-1)
        leaves = self._levels[0]
        if old is None:
            old = leaves[indices] if self.track_min else values
        leaves[indices] = values
        final = leaves[indices]
        # repeated indices with different values (the same bits otherwise: a copy; one memcmp)
        if final.tobytes() != values.tobytes():
            order = np.argsort(indices, kind="stable")
            ordered = indices[order]
            last = np.empty(len(ordered), bool)
            np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
            last[-1] = True
            leaves[ordered[last]] = values[order[last]]
            final = leaves[indices]
        self._refresh(indices, parents)
        if self._minimum is not None and len(indices):
            self._minimum.note(indices, old, final)

    def _refresh(self, indices: np.ndarray, parents: list[np.ndarray] | None = None) -> None:
        self._total = None
        self._prefix_stale = True
        node = indices
        for i, (blocks, level) in enumerate(zip(self._blocks, self._levels[1:], strict=True)):
            if len(level) <= len(node):  # a small level: all of it, no index arithmetic
                np.dot(blocks, self._ones, out=level[: len(blocks)])
                continue
            if parents is not None:  # the search's nodes of these leaves
                node = parents[i]
            else:  # a shift when b is a power of two (int64 floor division is ~5x slower)
                node = node >> self._shift if self._shift else node // self.branching
            level[node] = blocks.take(node, axis=0).dot(self._ones)  # .dot: 0.4 us less than @

    def fill(self, values: np.ndarray) -> None:
        """Replaces all leaves with ``values`` float64 ``[capacity]`` and rebuilds every level."""
        self._total = None
        self._prefix_stale = True
        self._levels[0][: self.capacity] = values
        self._levels[0][self.capacity :] = 0.0
        for blocks, level in zip(self._blocks, self._levels[1:], strict=True):
            sums = blocks @ self._ones
            level[: len(sums)] = sums
            level[len(sums) :] = 0.0
        if self._minimum is not None:
            self._minimum.rescan()

    def clear(self) -> None:
        """Sets every leaf to zero."""
        self._total = 0.0
        for level in (*self._levels, self._prefix):
            level[:] = 0.0
        self._prefix_stale = False
        if self._minimum is not None:
            self._minimum.reset()
