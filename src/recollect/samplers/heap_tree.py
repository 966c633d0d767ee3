"""A vectorized tournament tree: the ``k`` best leaves by a lexicographic key, O(k B log N).

Each leaf has a key ``(primary, stamp)``: a float64 and an int64 (a heap's
signed priority and its update counter); empty leaves are ``(+inf, max)``.
The tree is ``B``-ary with the levels of :class:`~recollect.samplers.SumTree`;
every internal node holds the index of the best leaf of its subtree (the
smallest key), recomputed from its ``B`` children after each batch
:meth:`TopTree.set` (a ``[K, B]`` gather per level, never a pass over all leaves).

:meth:`TopTree.best` finds the ``k`` best leaves top-down: the ancestors at
any level of the ``k`` best leaves are among the ``k`` best nodes of that
level (a node ranks by its best leaf; keys are distinct, since stamps are),
so each level keeps its ``k`` best nodes and expands their children:
``O(k B)`` keys compared per level, one ``lexsort`` each.
"""

from __future__ import annotations

import numpy as np

from recollect.samplers.sum_tree import level_sizes

__all__ = ["TopTree"]

_EMPTY_STAMP = np.iinfo(np.int64).max


class TopTree:
    """Best leaves by ``(primary, stamp)``, smallest first.

    Args:
        capacity: number of leaves (>= 1).
        branching: children per node (>= 2).
    """

    def __init__(self, capacity: int, branching: int = 16) -> None:
        self.capacity = int(capacity)
        self.branching = b = int(branching)
        sizes = level_sizes(self.capacity, b)
        self.primary = np.full(sizes[0], np.inf)
        self.stamp = np.full(sizes[0], _EMPTY_STAMP, np.int64)
        # best[i]: best leaf of each node of level i + 1 (level 0 is the leaves)
        self._best = [
            (np.arange(size, dtype=np.int64) * b ** (i + 1)) for i, size in enumerate(sizes[1:])
        ]

    @staticmethod
    def estimate_nbytes(capacity: int, branching: int = 16) -> int:
        """Bytes a tree of ``capacity`` leaves allocates (:attr:`nbytes`)."""
        sizes = level_sizes(int(capacity), int(branching))
        return 16 * sizes[0] + 8 * sum(sizes[1:])

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and the best-leaf levels."""
        return self.primary.nbytes + self.stamp.nbytes + sum(a.nbytes for a in self._best)

    def _argbest(self, leaves: np.ndarray) -> np.ndarray:
        """Column of the best leaf of each row of ``leaves`` int ``[K, B]``."""
        primary = self.primary[leaves]
        tie = primary == primary.min(axis=1, keepdims=True)
        return np.where(tie, self.stamp[leaves], _EMPTY_STAMP).argmin(axis=1)

    def set(self, indices: np.ndarray, primary: np.ndarray, stamp: np.ndarray) -> None:
        """Sets the keys of leaves ``indices`` (distinct) and refreshes their ancestors.

        Args:
            indices: int ``[K]`` distinct leaf indices.
            primary: float64 ``[K]`` primary keys (``inf``: empty).
            stamp: int64 ``[K]`` tie-breakers (distinct among non-empty leaves).
        """
        self.primary[indices] = primary
        self.stamp[indices] = stamp
        b = self.branching
        node = np.unique(np.asarray(indices, np.int64) // b)
        children = node[:, None] * b + np.arange(b)  # leaves
        for i, best in enumerate(self._best):
            leaves = children if i == 0 else self._best[i - 1][children]
            best[node] = leaves[np.arange(len(node)), self._argbest(leaves)]
            node = np.unique(node // b)
            children = node[:, None] * b + np.arange(b)

    def fill(self, primary: np.ndarray, stamp: np.ndarray) -> None:
        """Replaces every key (``[capacity]`` each) and rebuilds the levels."""
        self.primary[:] = np.inf
        self.stamp[:] = _EMPTY_STAMP
        self.primary[: self.capacity] = primary
        self.stamp[: self.capacity] = stamp
        b = self.branching
        for i, best in enumerate(self._best):
            below = np.arange(len(self.primary)) if i == 0 else self._best[i - 1]
            leaves = below.reshape(-1, b)
            best[:] = leaves[np.arange(len(leaves)), self._argbest(leaves)]

    def best(self, k: int) -> np.ndarray:
        """int64 ``[k]`` the ``k`` best leaves, best first (``k`` <= non-empty leaves)."""
        b = self.branching
        if not self._best:  # one level: the leaves are the top
            leaves = np.arange(len(self.primary))
        else:
            leaves = self._best[-1]
            nodes = np.arange(len(leaves), dtype=np.int64)
            for i in range(len(self._best) - 1, -1, -1):
                keep = np.lexsort((self.stamp[leaves], self.primary[leaves]))[:k]
                children = (nodes[keep][:, None] * b + np.arange(b)).reshape(-1)
                nodes = children
                leaves = children if i == 0 else self._best[i - 1][children]
        order = np.lexsort((self.stamp[leaves], self.primary[leaves]))[:k]
        return leaves[order]
