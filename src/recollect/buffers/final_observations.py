"""The side ring of a :class:`~recollect.TransitionBuffer`: observations no following step holds.

A transition's ``next_observation`` is normally the ``observation`` of the next
step of its env; where that chain breaks (an episode end, a reset) the
``next_observation`` is kept here.
"""

from __future__ import annotations

import numpy as np

from recollect.specs import FlatSpec

__all__ = ["FinalObservations"]


class FinalObservations:
    """Growable FIFO ring of observations that no following step holds.

    Entry ``k`` (a logical, never reused index) lives at position ``k % size``
    and belongs to the transition stored at step time ``times[k % size]``.
    Entries die in time order, when their transition's slot is overwritten.
    """

    def __init__(self, obs_flat: FlatSpec, max_size: int) -> None:
        self.obs_flat = obs_flat
        self.max_size = max_size
        self.size = 0
        self.arrays = [
            np.empty((0, *s), d) for s, d in zip(obs_flat.shapes, obs_flat.dtypes, strict=True)
        ]
        self.times = np.empty(0, np.int64)
        self.start = 0
        self.n = 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays) + self.times.nbytes

    def clear(self) -> None:
        self.start = self.n

    def append(self, leaves: list[np.ndarray], time: int, lo: int) -> np.ndarray:
        """Appends ``k`` observations of step ``time``; returns their logical indices."""
        k = len(leaves[0])
        if self.n - self.start + k > self.size:
            live = np.arange(self.start, self.n)
            self.start += int(np.searchsorted(self.times[live % self.size], lo)) if self.size else 0
            if self.n - self.start + k > self.size:
                self._grow(self.n - self.start + k)
        ks = np.arange(self.n, self.n + k)
        pos = ks % self.size
        for array, leaf in zip(self.arrays, leaves, strict=True):
            array[pos] = leaf
        self.times[pos] = time
        self.n += k
        return ks

    def _grow(self, needed: int) -> None:
        new_size = min(max(needed, 2 * self.size, 64), self.max_size)
        live = np.arange(self.start, self.n)
        new_arrays = []
        for array in self.arrays:
            grown = np.empty((new_size, *array.shape[1:]), array.dtype)
            grown[live % new_size] = array[live % self.size] if self.size else array[:0]
            new_arrays.append(grown)
        times = np.empty(new_size, np.int64)
        times[live % new_size] = self.times[live % self.size] if self.size else 0
        self.arrays, self.times, self.size = new_arrays, times, new_size

    def gather(self, refs: np.ndarray) -> list[np.ndarray]:
        pos = refs % self.size
        return [array[pos] for array in self.arrays]
