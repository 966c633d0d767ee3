"""Vectorized item selection over a table's slots (what Reverb's selectors do).

A table keeps its items in slots ``0..max_size-1`` with per-slot ``priority``
and insertion ``seq`` arrays. A selection sees only slots, priorities and
sequence numbers, never data. Every operation takes arrays of slots:

- :class:`Dense` -- the live slots as a dense array (swap-remove in batches),
  behind Uniform and the heaps;
- :class:`Ordered` -- slots in insertion order with lazy deletion, behind Fifo
  and Lifo (amortized O(1) per item);
- :class:`PrioritizedSelection` -- a sum tree of ``priority ** exponent``.

``draw(n, rng)`` returns ``n`` slots with their probabilities: independent draws
for the stochastic selectors; for the deterministic ones (Fifo, Lifo, heaps) the
first ``n`` items in their order (the table repeats them as sampling
sequentially would), each with probability 1.
"""

from __future__ import annotations

import numpy as np

from recollect.reverb import item_selectors as sel
from recollect.samplers.sum_tree import SumTree


class Dense:
    """The live slots, densely packed: ``slots[:count]``; ``pos[slot]`` its index."""

    def __init__(self, capacity: int) -> None:
        self.slots = np.zeros(capacity, np.int64)
        self.pos = np.full(capacity, -1, np.int64)
        self.count = 0

    def add(self, slots: np.ndarray) -> None:
        n = self.count
        self.slots[n : n + len(slots)] = slots
        self.pos[slots] = np.arange(n, n + len(slots))
        self.count = n + len(slots)

    def remove(self, slots: np.ndarray) -> None:
        """Removes distinct live ``slots``: the tail's survivors fill the holes."""
        k = len(slots)
        if k == 0:
            return
        n = self.count
        gone = np.zeros(len(self.pos), bool)
        gone[slots] = True
        holes = self.pos[slots]
        holes = holes[holes < n - k]
        tail = self.slots[n - k : n]
        movers = tail[~gone[tail]]
        self.slots[holes] = movers
        self.pos[movers] = holes
        self.pos[slots] = -1
        self.count = n - k

    def live(self) -> np.ndarray:
        return self.slots[: self.count]

    def clear(self) -> None:
        self.pos[self.slots[: self.count]] = -1
        self.count = 0


class Selection:
    """Base: a selection keeps its own index of the table's live slots."""

    deterministic = False

    def __init__(self, capacity: int, priority: np.ndarray, seq: np.ndarray) -> None:
        self.priority = priority  # the table's arrays (read only here)
        self.seq = seq
        self.dense = Dense(capacity)

    def insert(self, slots: np.ndarray) -> None:
        self.dense.add(slots)

    def update(self, slots: np.ndarray) -> None:
        """The priorities of ``slots`` changed (already written to the table's array)."""

    def delete(self, slots: np.ndarray) -> None:
        self.dense.remove(slots)

    def clear(self) -> None:
        self.dense.clear()

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


class UniformSelection(Selection):
    """P(i) = 1 / N."""

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        live = self.dense.live()
        picks = live[rng.integers(0, len(live), n)]
        return picks, np.full(n, 1.0 / len(live))


class PrioritizedSelection(Selection):
    """P(i) = p_i^a / sum_j p_j^a (uniform while every priority is 0)."""

    def __init__(self, capacity: int, priority: np.ndarray, seq: np.ndarray, exponent: float):
        super().__init__(capacity, priority, seq)
        self.exponent = float(exponent)
        self.tree = SumTree(capacity)

    def _set(self, slots: np.ndarray) -> None:
        self.tree.set(slots, np.power(self.priority[slots], self.exponent))

    def insert(self, slots: np.ndarray) -> None:
        super().insert(slots)
        self._set(slots)

    def update(self, slots: np.ndarray) -> None:
        self._set(slots)

    def delete(self, slots: np.ndarray) -> None:
        super().delete(slots)
        self.tree.set(slots, np.zeros(len(slots)))

    def clear(self) -> None:
        super().clear()
        self.tree.clear()

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        total = self.tree.total
        if not total > 0:
            live = self.dense.live()
            return live[rng.integers(0, len(live), n)], np.full(n, 1.0 / len(live))
        picks, values = self.tree.find_values(rng.uniform(0.0, total, n))
        return picks, values / total


class OrderedSelection(Selection):
    """Fifo (``newest=False``) or Lifo (``newest=True``) by insertion order."""

    deterministic = True

    def __init__(self, capacity: int, priority: np.ndarray, seq: np.ndarray, newest: bool):
        super().__init__(capacity, priority, seq)
        self.newest = newest
        self.order = np.zeros(max(16, capacity), np.int64)  # slots by insertion
        self.order_seq = np.zeros(max(16, capacity), np.int64)
        self.head = 0
        self.tail = 0
        self.alive = np.zeros(capacity, bool)

    def insert(self, slots: np.ndarray) -> None:
        super().insert(slots)
        need = self.tail + len(slots)
        if need > len(self.order):
            self._compact(len(slots))
        t = self.tail
        self.order[t : t + len(slots)] = slots
        self.order_seq[t : t + len(slots)] = self.seq[slots]
        self.tail = t + len(slots)
        self.alive[slots] = True

    def _valid(self, lo: int, hi: int) -> np.ndarray:
        slots = self.order[lo:hi]
        return self.alive[slots] & (self.seq[slots] == self.order_seq[lo:hi])

    def _compact(self, extra: int) -> None:
        keep = np.flatnonzero(self._valid(self.head, self.tail)) + self.head
        slots, seqs = self.order[keep], self.order_seq[keep]
        size = max(len(self.order), 2 * (len(keep) + extra))
        self.order = np.zeros(size, np.int64)
        self.order_seq = np.zeros(size, np.int64)
        self.order[: len(keep)] = slots
        self.order_seq[: len(keep)] = seqs
        self.head, self.tail = 0, len(keep)

    def delete(self, slots: np.ndarray) -> None:
        super().delete(slots)
        self.alive[slots] = False

    def clear(self) -> None:
        super().clear()
        self.alive[:] = False
        self.head = self.tail = 0

    def first(self, n: int) -> np.ndarray:
        """Up to ``n`` live slots, oldest (Fifo) or newest (Lifo) first."""
        window = max(2 * n, 16)
        while True:
            if self.newest:
                lo, hi = max(self.head, self.tail - window), self.tail
                valid = self._valid(lo, hi)
                found = self.order[lo:hi][valid][::-1]
                if len(found) >= n or lo == self.head:
                    # dead entries at the tail are dropped for good
                    last = np.flatnonzero(valid)
                    self.tail = lo + int(last[-1]) + 1 if len(last) else lo
                    return found[:n]
            else:
                lo, hi = self.head, min(self.tail, self.head + window)
                valid = self._valid(lo, hi)
                found = self.order[lo:hi][valid]
                if len(found) >= n or hi == self.tail:
                    first = np.flatnonzero(valid)
                    self.head = lo + int(first[0]) if len(first) else hi
                    return found[:n]
            window *= 4

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        slots = self.first(n)
        return slots, np.ones(len(slots))


class HeapSelection(Selection):
    """The smallest (``min_heap``) or largest priority first; ties: the oldest first."""

    deterministic = True

    def __init__(self, capacity: int, priority: np.ndarray, seq: np.ndarray, min_heap: bool):
        super().__init__(capacity, priority, seq)
        self.min_heap = min_heap

    def first(self, n: int) -> np.ndarray:
        live = self.dense.live()
        prio = self.priority[live] if self.min_heap else -self.priority[live]
        if n < len(live):
            part = np.argpartition(prio, n - 1)[:n]
            cut = prio[part].max()
            # every slot tied with the cut competes on age
            live = live[prio <= cut]
            prio = prio[prio <= cut]
        order = np.lexsort((self.seq[live], prio))
        return live[order[:n]]

    def draw(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        slots = self.first(n)
        return slots, np.ones(len(slots))


def build(
    selector: sel.Selector, capacity: int, priority: np.ndarray, seq: np.ndarray
) -> Selection:
    """The selection that implements ``selector`` over a table's arrays."""
    if isinstance(selector, sel.Uniform):
        return UniformSelection(capacity, priority, seq)
    if isinstance(selector, sel.Prioritized):
        return PrioritizedSelection(capacity, priority, seq, selector.priority_exponent)
    if isinstance(selector, (sel.Fifo, sel.Lifo)):
        return OrderedSelection(capacity, priority, seq, isinstance(selector, sel.Lifo))
    if isinstance(selector, sel._Heap):
        return HeapSelection(capacity, priority, seq, selector.min_heap)
    raise TypeError(f"unknown selector {selector!r}; use one of reverb.selectors' classes.")
