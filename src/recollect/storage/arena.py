"""A byte arena of large blocks with a free list: where compressed values live.

One lazily committed uint8 array (an anonymous mapping from 1 MiB on: the kernel
maps a page only when it is first written, so RSS tracks the bytes written, not the
reserved size) cut into equal blocks. :func:`zeros` gives ring storage the same
memory. Reservations of 1 GiB or more are anonymous ``MAP_NORESERVE`` mappings
where the platform has them: the worst case of a 10M-frame buffer is tens of GiB
of address space, which Linux's default overcommit check refuses to ``np.zeros``
on a machine with less RAM (the pages written are all that is ever committed).

Values are appended to the current block, never split across blocks; each
block counts its live values. When a value is overwritten its block's count
drops, and a block whose count reaches zero goes back to the free list and is
reused before any fresh block. A ring buffer overwrites values in the order it
wrote them, so blocks empty in order and the arena holds the live compressed
bytes plus about one block per write front. No Python object is kept per value:
callers keep ``(offset, length)`` in arrays, and every operation is vectorized
over a batch of values.
"""

from __future__ import annotations

import math
import mmap
import platform
import sys
from typing import Any

import numpy as np

__all__ = ["ByteArena", "reserve", "zeros"]

PAGE = 4096
#: Reservations from this size on are anonymous mappings (where available): zero pages
#: committed only when written, whatever state the C allocator is in. ``np.zeros`` calls
#: ``calloc``, and glibc may serve up to 32 MiB from a reused heap chunk, which it zeroes
#: page by page: a 16 MiB ring leaf measured 14-16 MiB resident before any write.
LAZY_MIN_BYTES = 1 << 20
#: Reservations from this size on are ``MAP_NORESERVE`` mappings (where available).
NORESERVE_MIN_BYTES = 1 << 30


def _noreserve_flag() -> int:
    """Linux's ``MAP_NORESERVE`` (``mmap`` names it from Python 3.13; before that, its
    value on the architectures where it is 0x4000), or 0 where it is unknown."""
    flag = getattr(mmap, "MAP_NORESERVE", 0)
    if flag or not sys.platform.startswith("linux"):
        return flag
    return 0x4000 if platform.machine() in ("x86_64", "aarch64", "arm64") else 0


_NORESERVE = _noreserve_flag()
_ANONYMOUS = getattr(mmap, "MAP_ANONYMOUS", 0)  # 0: no anonymous mmap (Windows)
_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 0)


def reserve(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of ``nbytes`` whose pages are committed only when written.

    Reservations of ``LAZY_MIN_BYTES`` or more map anonymous memory (advised for
    transparent huge pages, as numpy's own large allocations are); those of
    ``NORESERVE_MIN_BYTES`` or more add ``MAP_NORESERVE`` (Linux), so the kernel's
    overcommit heuristic does not refuse address space beyond the machine's RAM.
    Smaller ones, platforms without anonymous ``mmap``, or a failed mapping get
    ``np.zeros`` (which may raise MemoryError for a reservation the OS refuses).
    """
    if nbytes >= LAZY_MIN_BYTES and _ANONYMOUS:
        noreserve = _NORESERVE if nbytes >= NORESERVE_MIN_BYTES else 0
        try:
            raw = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | _ANONYMOUS | noreserve)
        except OSError:
            pass
        else:
            if _HUGEPAGE:
                try:
                    raw.madvise(_HUGEPAGE)
                except OSError:  # a kernel without transparent huge pages
                    pass
            return np.frombuffer(raw, np.uint8)  # keeps the mapping alive
    return np.zeros(nbytes, np.uint8)


def zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.zeros(shape, dtype)`` from :func:`reserve`: pages committed only when written."""
    dtype = np.dtype(dtype)
    return reserve(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)


class ByteArena:
    """Equal-size blocks of one large array; values addressed by absolute offset.

    Args:
        reserve_bytes: bytes reserved (address space; committed only when written).
        block_bytes: block size; a value longer than a block cannot be stored.

    The arena grows (one copy, amortized doubling) when every block is in use.
    """

    def __init__(self, reserve_bytes: int, block_bytes: int = 1 << 20) -> None:
        self.block_bytes = -(-block_bytes // PAGE) * PAGE
        blocks = max(2, -(-reserve_bytes // self.block_bytes))
        self.data = reserve(blocks * self.block_bytes)
        self.live = np.zeros(blocks, np.int64)
        self._fresh = 0  # blocks [0, _fresh) were handed out at least once
        self._free: list[int] = []  # emptied blocks, reused first (LIFO: still paged in)
        self._block = self._next_block()
        self._cursor = 0

    @property
    def blocks_in_use(self) -> int:
        """Blocks holding at least one live value, or the block being written."""
        return self._fresh - len(self._free)

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks ever handed out (what RSS holds for the arena)."""
        return self._fresh * self.block_bytes

    def _next_block(self) -> int:
        if self._free:
            return self._free.pop()
        if self._fresh == len(self.live):
            self._grow()
        self._fresh += 1
        return self._fresh - 1

    def _grow(self) -> None:
        blocks = len(self.live)
        data = reserve(2 * blocks * self.block_bytes)
        data[: len(self.data)] = self.data
        self.data = data
        self.live = np.concatenate([self.live, np.zeros(blocks, np.int64)])

    def append(self, data: bytes | np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Stores values (``data`` = their bytes joined, ``lengths`` int64 ``[n]``).

        Returns their int64 absolute ``offsets`` ``[n]``. A batch that does not
        fit the current block's rest continues in the next block (a loop over
        blocks touched, not over values).
        """
        raw = np.frombuffer(data, np.uint8)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        if len(raw) <= self.block_bytes - self._cursor:  # the common case: all fit the block
            at = self._block * self.block_bytes + self._cursor
            self.data[at : at + len(raw)] = raw
            self.live[self._block] += len(lengths)
            self._cursor += len(raw)
            return starts + at
        offsets = np.empty(len(lengths), np.int64)
        done = 0
        while done < len(lengths):
            room = self.block_bytes - self._cursor
            base = int(starts[done])
            fit = int(np.searchsorted(ends[done:], base + room, side="right"))
            if fit == 0:  # the block's rest is too small for the next value: start a new one
                if self._cursor == 0:
                    raise ValueError("a value is longer than an arena block")
                if self.live[self._block] == 0:  # emptied while it was being written
                    self._free.append(self._block)
                self._block, self._cursor = self._next_block(), 0
                continue
            stop = done + fit
            size = int(ends[stop - 1]) - base
            at = self._block * self.block_bytes + self._cursor
            self.data[at : at + size] = raw[base : base + size]
            offsets[done:stop] = starts[done:stop] - base + at
            self.live[self._block] += fit
            self._cursor += size
            done = stop
        return offsets

    def release(self, offsets: np.ndarray) -> None:
        """Marks the values at ``offsets`` (int64, any shape; < 0 ignored) as dead."""
        blocks = offsets[offsets >= 0] // self.block_bytes
        if not len(blocks):
            return
        np.subtract.at(self.live, blocks, 1)  # no sort: a write touches one or two blocks
        emptied = blocks[self.live[blocks] == 0]
        if len(emptied):  # rare: a block's last value went
            emptied = np.unique(emptied)
            self._free.extend(emptied[emptied != self._block].tolist())

    def clear(self) -> None:
        """Forgets every value (blocks stay allocated and are reused)."""
        self.live[:] = 0
        self._free = [b for b in range(self._fresh) if b != self._block]
        self._cursor = 0
