"""The shard's check of a writer's chunk: flat leaves of the spec's dtypes and shapes.

A chunk travels as the writer's flat, already-cast leaves (``Writer`` validated and
cast every step on its side), so the shard neither unflattens, flattens nor casts:
it compares the leaves' types, dtypes and shapes with the spec's in three C-level
passes (``map`` and list equality, no Python loop over leaves or steps) and
block-writes them. Only a chunk that fails the check is looked at leaf by leaf, to
name the leaf in the error.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from recollect.errors import DTypeError, ShapeError, SpecError
from recollect.specs import FlatSpec

__all__ = ["ChunkCheck"]

_DTYPE = operator.attrgetter("dtype")
_SHAPE = operator.attrgetter("shape")
#: leading dims ``(k, T)`` whose expected shapes a check keeps (a writer sends few kinds)
_CACHED_SHAPES = 64


class ChunkCheck:
    """``check(leaves, k)``: the number of steps per row ``T`` of a chunk, or the error.

    Args:
        flat: the table's flattened spec.
        table, shard: named in the errors.
    """

    def __init__(self, flat: FlatSpec, table: str, shard: int) -> None:
        self._flat = flat
        self._dtypes = list(flat.dtypes)
        self._where = f"table {table!r} shard {shard}"
        self._shapes: dict[tuple[int, int], list[tuple[int, ...]]] = {}

    def __call__(self, leaves: Any, k: int) -> int:
        """Checks a chunk for ``k`` leased rows; returns its steps per row ``T``.

        Args:
            leaves: a list of ``numpy.ndarray``, one per leaf of the spec in its flat
                order, each ``[k, T, *leaf shape]`` of the leaf's dtype exactly.
            k: rows of the lease.

        Raises:
            SpecError: not a list of one array per leaf.
            ShapeError: a leaf is not ``[k, T, *leaf shape]`` with one ``T`` for all.
            DTypeError: a leaf is not of the spec's dtype (the shard casts nothing).
        """
        if (
            type(leaves) is list
            and len(leaves) == len(self._dtypes)
            and set(map(type, leaves)) == {np.ndarray}
            and leaves[0].ndim >= 2
        ):
            steps = leaves[0].shape[1]
            if list(map(_DTYPE, leaves)) == self._dtypes and (
                list(map(_SHAPE, leaves)) == self._expected(k, steps)
            ):
                return int(steps)
        raise self._error(leaves, k)

    def _expected(self, k: int, steps: int) -> list[tuple[int, ...]]:
        shapes = self._shapes.get((k, steps))
        if shapes is None:
            shapes = [(k, steps, *s) for s in self._flat.shapes]
            if len(self._shapes) < _CACHED_SHAPES:
                self._shapes[k, steps] = shapes
        return shapes

    def _error(self, leaves: Any, k: int) -> Exception:
        """The error of a chunk that failed the check, naming the first bad leaf."""
        what = (
            "send the spec's flat leaves (recollect.service.Writer does: it validates and casts "
            "each step on its side)."
        )
        paths = self._flat.paths
        if type(leaves) is not list or len(leaves) != len(paths):
            got = (
                f"{type(leaves).__name__} of {len(leaves)}"
                if type(leaves) is list
                else (type(leaves).__name__)
            )
            return SpecError(
                f"{self._where}: a chunk must be a list of {len(paths)} arrays, one per leaf of "
                f"the spec in its flat order {list(paths)}; got {got}. A writer must {what}"
            )
        steps = (
            leaves[0].shape[1] if isinstance(leaves[0], np.ndarray) and leaves[0].ndim >= 2 else 0
        )
        for leaf, path, dtype, shape in zip(
            leaves, paths, self._flat.dtypes, self._flat.shapes, strict=True
        ):
            if type(leaf) is not np.ndarray:
                return SpecError(
                    f"{self._where}: chunk leaf '{path}' must be a numpy.ndarray; got "
                    f"{type(leaf).__name__}. A writer must {what}"
                )
            if leaf.dtype != dtype:
                return DTypeError(
                    f"{self._where}: chunk leaf '{path}' must have dtype {dtype} (the shard "
                    f"casts nothing); got {leaf.dtype}. A writer must {what}"
                )
            if leaf.shape != (k, steps, *shape):
                return ShapeError(
                    f"{self._where}: chunk leaf '{path}' must have shape {(k, steps, *shape)} "
                    f"([rows of the lease={k}, steps={steps}, *leaf shape]); got {leaf.shape}. "
                    f"A writer must {what}"
                )
        return ShapeError(f"{self._where}: the chunk does not match the spec. A writer must {what}")
