"""On-disk storage: every leaf is a ``.npy`` file mapped with ``np.memmap``.

``ReplayBuffer(..., storage="memmap", directory=d)`` keeps its arrays in files
under ``d`` so capacity can exceed RAM (the OS pages data in and out); the
API and sampling semantics are those of the RAM ring. This module only maps
files; the directory's manifest (spec, clocks, sampler state) is written and
read by the buffer through the state protocol (:mod:`recollect.buffers.memmap_state`).
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.specs import FlatSpec
from recollect.state.npyio import map_npy
from recollect.state.space import create_npy_memmap
from recollect.storage.disk_arena import PREFETCH_MIN_FILE, prefetch_items
from recollect.storage.gather import Gatherer
from recollect.storage.ring import RingStorage

__all__ = ["MemmapStorage", "memmap_allocator"]


def memmap_allocator(directory: pathlib.Path, reopen: bool) -> Any:
    """Returns ``allocate(name, shape, dtype)`` creating (or reopening) ``directory/name.npy``.

    Zero-size arrays are plain numpy arrays (nothing to map).

    Raises:
        CheckpointError: on reopen, a file is missing or has another shape/dtype.
        DiskFullError: on creation, the disk cannot hold a file (its blocks are
            reserved before it is mapped, so a full disk never means SIGBUS).
    """

    def allocate(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if int(np.prod(shape)) == 0:
            return np.zeros(shape, dtype)
        path = directory / f"{name}.npy"
        if not reopen:
            return create_npy_memmap(path, shape, dtype)
        try:
            array = map_npy(path)  # a regular file (no link), not torn
        except CheckpointError:
            raise
        except (OSError, ValueError, EOFError) as err:  # EOFError: an empty (torn) file
            raise CheckpointError(f"cannot reopen memmap file {path}: {err}") from err
        if array.shape != tuple(shape) or array.dtype != dtype:
            raise CheckpointError(
                f"memmap file {path} holds shape {array.shape}, dtype {array.dtype}; expected "
                f"shape {tuple(shape)}, dtype {dtype}. The directory belongs to another buffer."
            )
        return array

    return allocate


class MemmapStorage(RingStorage):
    """:class:`RingStorage` whose leaf arrays are memory-mapped ``.npy`` files.

    Args:
        flat_spec, num_envs, max_length, gatherer: as :class:`RingStorage`.
        directory: where the files live (``leaf-<i>-<path>.npy``).
        reopen: map existing files (``r+``) instead of creating them.

    Raises:
        CheckpointError: on reopen, a file is missing or has another shape/dtype.
    """

    def __init__(
        self,
        flat_spec: FlatSpec,
        num_envs: int,
        max_length: int,
        gatherer: Gatherer | None = None,
        *,
        directory: pathlib.Path,
        reopen: bool = False,
    ) -> None:
        self.directory = pathlib.Path(directory)
        self._allocator = memmap_allocator(self.directory, reopen)
        super().__init__(flat_spec, num_envs, max_length, gatherer)

    def _allocate(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._allocator(name, (self.num_envs, self.max_length, *shape), dtype)

    def gather(
        self,
        rows: np.ndarray,
        slots: np.ndarray,
        *,
        times: np.ndarray | None = None,
        leaf_ids: Sequence[int] | None = None,
    ) -> list[np.ndarray]:
        """As :meth:`RingStorage.gather`, after asking the OS for the gathered rows of
        each leaf file of 16 MiB or more at once
        (:func:`~recollect.storage.disk_arena.prefetch_items`): a cold gather waits for
        one round of concurrent reads, not one page fault per item."""
        flat = None
        for i in range(len(self.arrays)) if leaf_ids is None else leaf_ids:  # over leaves
            array = self.arrays[i]
            if array.nbytes >= PREFETCH_MIN_FILE:
                flat = self.flat_index(np.asarray(rows), slots) if flat is None else flat
                prefetch_items(array, flat, array.nbytes // (self.num_envs * self.max_length))
        return super().gather(rows, slots, times=times, leaf_ids=leaf_ids)

    def flush(self) -> None:
        """Writes dirty pages of every mapped file to disk."""
        for array in self.arrays:
            if isinstance(array, np.memmap):
                array.flush()
