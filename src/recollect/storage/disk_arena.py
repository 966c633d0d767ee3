"""A :class:`~recollect.storage.arena.ByteArena` whose blocks live in one file on disk.

The file is a sequence of equal blocks (no header), mapped with ``np.memmap``.
Values are appended to the current block exactly as in RAM; a block whose
every value was overwritten goes back to the free list and is rewritten from
its start, so the file holds the live compressed bytes plus the free and
partly dead blocks: a ring buffer empties blocks in write order, and the file
stays within about one block per write front plus 1/8 (growth step) of the
live bytes (see :data:`GROW_FRACTION`).

The file only grows, by whole blocks reserved with ``posix_fallocate`` (never
sparse: a store to an unallocated page of a full disk would kill the process
with ``SIGBUS``). :meth:`DiskArena.reserve` grows it *before* a write changes
anything, so a full disk raises :class:`~recollect.errors.DiskFullError` with
the buffer untouched. An older mapping stays valid after a growth (the file
only grows), so a reader outside the lock holding it reads the same bytes.

Live counts and the free list are not stored: :meth:`DiskArena.rebuild` derives
them from the offset index when a directory is reopened.
"""

from __future__ import annotations

import mmap
import os
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.state.safe_files import create_new
from recollect.state.space import reserve as reserve_file
from recollect.storage.arena import PAGE, ByteArena

__all__ = [
    "GROW_FRACTION",
    "GROW_MIN_BLOCKS",
    "PREFETCH_GAP",
    "PREFETCH_MIN_FILE",
    "DiskArena",
    "extents",
    "prefetch_items",
]

#: the file grows by at least this fraction of its size (bounds disk slack to ~1/8)
GROW_FRACTION = 8
#: ... and by at least this many blocks
GROW_MIN_BLOCKS = 4
#: values closer than this (bytes) are read ahead as one extent (a read of the gap
#: costs less than another request)
PREFETCH_GAP = 4 * PAGE
#: mapped arrays smaller than this are not read ahead item by item: the kernel's
#: read-around (128 KiB a page fault) soon caches most of such a file
PREFETCH_MIN_FILE = 16 << 20
#: MADV_WILLNEED where the platform has it (Linux, macOS), else None
_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)


def willneed(advise: Any, starts: np.ndarray, sizes: np.ndarray) -> None:
    """``advise(MADV_WILLNEED, start, size)`` for each extent (a map of the C method:
    no bytecode per extent)."""
    for _ in map(advise, repeat(_WILLNEED, len(starts)), starts.tolist(), sizes.tolist()):
        pass


def prefetch_items(array: Any, flat: np.ndarray, item_bytes: int) -> None:
    """Read-ahead of items ``flat`` (flat indices of ``item_bytes`` each) of a mapped array
    (an ``np.memmap`` of its whole file, as the ``.npy`` files of memmap storage are):
    one ``madvise(MADV_WILLNEED)`` per coalesced extent, so a cold gather waits for one
    round of concurrent reads. A no-op for arrays under :data:`PREFETCH_MIN_FILE`, arrays
    that are not mapped, and platforms without ``madvise``."""
    handle = getattr(array, "_mmap", None)
    if handle is None or _WILLNEED is None or array.nbytes < PREFETCH_MIN_FILE or not flat.size:
        return
    base = int(getattr(array, "offset", 0)) % mmap.ALLOCATIONGRANULARITY  # where data starts
    starts = base + flat.reshape(-1).astype(np.int64) * item_bytes
    willneed(handle.madvise, *extents(starts, np.full(len(starts), item_bytes, np.int64)))


def extents(offsets: np.ndarray, lengths: np.ndarray, gap: int = PREFETCH_GAP) -> tuple:
    """The byte ranges holding values ``(offsets, lengths)``, page-aligned, sorted and
    coalesced where less than ``gap`` bytes apart: ``(starts, sizes)`` int64 ``[m]``."""
    aligned = offsets - offsets % PAGE
    order = np.argsort(aligned)
    starts = aligned[order]
    if not len(starts):
        return starts, starts
    ends = np.maximum.accumulate((offsets + lengths)[order])  # running end of each run
    new = np.empty(len(starts), bool)
    new[0] = True
    new[1:] = starts[1:] > ends[:-1] + gap
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(starts) - 1)
    return starts[first], ends[last] - starts[first]


class DiskArena(ByteArena):
    """Equal blocks of one file ``path``; values addressed by absolute byte offset.

    Args:
        path: the block file (created, or mapped again with ``reopen``).
        block_bytes: block size (rounded up to whole pages).
        reopen: map the existing file (its size a whole number of blocks).

    Raises:
        DiskFullError: the disk cannot hold the first blocks (nothing is left at ``path``).
        CheckpointError: on reopen, the file is missing or not whole blocks.
    """

    def __init__(self, path: Path, block_bytes: int, reopen: bool = False) -> None:
        self.path = Path(path)
        self.block_bytes = -(-block_bytes // PAGE) * PAGE
        if reopen:
            try:
                size = os.stat(self.path).st_size
            except OSError as err:
                raise CheckpointError(f"cannot reopen block file {self.path}: {err}") from err
            if size == 0 or size % self.block_bytes:
                raise CheckpointError(
                    f"block file {self.path} holds {size} bytes, not a whole number of "
                    f"{self.block_bytes}-byte blocks; the directory is damaged. Restore it "
                    "from a checkpoint or delete it to start over."
                )
            blocks = size // self.block_bytes
        else:
            blocks = 1  # grows by GROW_MIN_BLOCKS or more when first needed
            with create_new(self.path, "w+b") as f:
                try:
                    reserve_file(f, self.path, blocks * self.block_bytes)
                except BaseException:
                    self.path.unlink(missing_ok=True)
                    raise
        self._map(blocks)
        self.live = np.zeros(blocks, np.int64)
        self._fresh = 0
        self._free: list[int] = []
        self._block = self._next_block()
        self._cursor = 0

    def _map(self, blocks: int) -> None:
        self.map = np.memmap(self.path, np.uint8, "r+", shape=(blocks * self.block_bytes,))
        self.data = self.map.view(np.ndarray)  # plain view: faster fancy reads, same pages
        handle = getattr(self.map, "_mmap", None)  # numpy's mmap object of the file
        self._advise = None if handle is None or _WILLNEED is None else handle.madvise

    def prefetch(self, offsets: np.ndarray, lengths: np.ndarray) -> None:
        """Asks the OS to read the pages of values ``(offsets, lengths)`` (int64 ``[n]``),
        all at once and in the background (``madvise(MADV_WILLNEED)`` over their sorted,
        coalesced extents), so a cold read waits for one round of concurrent reads
        instead of one page fault after another. Pages already cached cost a page-cache
        lookup. A no-op where ``madvise`` is missing."""
        advise = self._advise
        if advise is None or not len(offsets):
            return
        willneed(advise, *extents(offsets, lengths.astype(np.int64)))

    @property
    def disk_bytes(self) -> int:
        """Bytes of the block file on disk."""
        return len(self.live) * self.block_bytes

    def _grow(self, blocks: int = 1) -> None:
        """Adds at least ``blocks`` blocks (and at least 1/GROW_FRACTION of the file).

        Raises:
            DiskFullError: the filesystem cannot hold them (the file keeps its size).
        """
        old = len(self.live)
        new = old + max(blocks, GROW_MIN_BLOCKS, old // GROW_FRACTION)
        with open(self.path, "r+b") as f:
            reserve_file(f, self.path, new * self.block_bytes)
        self._map(new)
        self.live = np.concatenate([self.live, np.zeros(new - old, np.int64)])

    def reserve(self, nbytes: int, values: int) -> None:
        """Makes room for ``values`` values of ``nbytes`` in all before they are stored.

        Values never straddle blocks, so a block may end with up to one value's worth
        unused; blocks hold at least 4 values of the largest size, so asking for
        twice the bytes (plus one block) is enough.

        Raises:
            DiskFullError: the disk cannot hold them; nothing was changed.
        """
        if nbytes <= self.block_bytes - self._cursor or values == 0:
            return
        needed = -(-2 * nbytes // self.block_bytes) + 1
        available = len(self._free) + len(self.live) - self._fresh
        if available < needed:
            self._grow(needed - available)

    def rebuild(self, offsets: np.ndarray, lengths: np.ndarray) -> int:
        """Derives the live counts and free list from the index (after a reopen).

        Entries that point outside the file (a write torn by a crash) are set to -1.
        Returns how many entries were cleared.
        """
        flat_off, flat_len = offsets.reshape(-1), lengths.reshape(-1)
        used = flat_off >= 0
        bad = used & ((flat_len <= 0) | (flat_off + flat_len.astype(np.int64) > len(self.data)))
        cleared = int(np.count_nonzero(bad))
        if cleared:
            flat_off[bad] = -1
            used &= ~bad
        blocks = len(self.live)
        self.live = np.bincount(flat_off[used] // self.block_bytes, minlength=blocks)
        self.live = self.live.astype(np.int64)
        self._fresh = blocks
        self._free = np.flatnonzero(self.live == 0)[::-1].tolist()  # lowest reused first
        self._block = self._next_block()
        self._cursor = 0
        return cleared

    def flush(self) -> None:
        """Writes the dirty pages of the block file to disk."""
        self.map.flush()
