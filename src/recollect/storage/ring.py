"""Numpy ring storage: one contiguous array per leaf, leading dims ``[num_envs, max_length]``.

Storage owns bytes and nothing else: it knows slots, not ids, windows or
sampling. Slot ``(row, t % max_length)`` holds step ``t`` of env row ``row``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recollect.specs import FlatSpec
from recollect.storage._gather import gather_leaves

__all__ = ["RingStorage"]


class RingStorage:
    """Preallocated ``[num_envs, max_length, *leaf_shape]`` arrays, one per leaf.

    Args:
        flat_spec: the flattened spec.
        num_envs: number of env rows.
        max_length: slots per row.

    Each leaf also has a row-flattened view ``[num_envs * max_length, *shape]``,
    so a gather is one row take per leaf with a single integer index
    (see :mod:`recollect.storage._gather`).
    """

    def __init__(self, flat_spec: FlatSpec, num_envs: int, max_length: int) -> None:
        self.flat_spec = flat_spec
        self.num_envs = num_envs
        self.max_length = max_length
        self.arrays: list[np.ndarray] = [
            self._allocate(shape, dtype)
            for shape, dtype in zip(flat_spec.shapes, flat_spec.dtypes, strict=True)
        ]
        self.refresh_views()

    def refresh_views(self) -> None:
        """Derives the views of ``arrays``; call it after replacing entries of ``arrays``.

        ``flat_views``: row-flattened ``[num_envs * max_length, *shape]`` (what
        :meth:`gather` takes rows of); ``_columns``: time-major
        ``[max_length, num_envs, *shape]`` (what :meth:`write_column` writes through).
        """
        n = self.num_envs * self.max_length
        self.flat_views: list[np.ndarray] = [a.reshape((n, *a.shape[2:])) for a in self.arrays]
        self._columns = [a.swapaxes(0, 1) for a in self.arrays]

    def _allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.zeros((self.num_envs, self.max_length, *shape), dtype=dtype)

    @property
    def nbytes(self) -> int:
        """Bytes held by the leaf arrays."""
        return sum(a.nbytes for a in self.arrays)

    def write_column(self, slot: int, leaves: Sequence[np.ndarray]) -> None:
        """Writes one step for every row at ``slot``; leaves are ``[num_envs, *shape]``."""
        for column, leaf in zip(self._columns, leaves):  # noqa: B905 - lengths checked by callers
            column[slot] = leaf  # int index of a time-major view: numpy's cheapest setitem

    def gather(
        self, flat_index: np.ndarray, leaf_ids: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        """Gathers ``row * max_length + slot`` indices of any shape, one row take per leaf.

        Returns arrays shaped ``[*flat_index.shape, *leaf_shape]``, views into one
        new block of memory; row leaves are copied with ``np.take`` (one memmove
        per row), large ones by several threads (see :mod:`recollect.storage._gather`).
        """
        views = self.flat_views if leaf_ids is None else [self.flat_views[i] for i in leaf_ids]
        return gather_leaves(views, flat_index)

    def read_rows(self, slots: np.ndarray) -> list[np.ndarray]:
        """Returns ``[num_envs, len(slots), *shape]`` copies of the given slots of every row."""
        return [array[:, slots] for array in self.arrays]
