"""Column data stored once, shared by every item that references it.

Reverb keeps appended data in chunks and lets items of any table reference
slices of them. Here each distinct column type (dtype, shape) has one
:class:`Pool`: a growable array of rows handed out in blocks of
``BLOCK_ROWS``. A writer's stream fills one open block per column, so the steps
of one stream are consecutive rows; an item is an int64 array of row indices
per column (kept by its table). Every row a stream still holds and every row an
item references counts one reference on its block (``np.add.at`` over the
rows' blocks, never a loop over items); a block whose count drops to zero goes
back to the pool's free list and is reused. Memory therefore stays near the raw
bytes of the appended steps plus 8 bytes per referenced row.

All methods run under the store's lock; a table gathering sample rows takes
that lock too (after its own), so rows are never freed or moved under a reader.
"""

from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass, field

import numpy as np

from recollect.errors import InvalidArgumentError

BLOCK_ROWS = 256
RESERVE_BYTES = 16 << 20  # a plain pool's first allocation, at most (its untouched pages
# cost no memory, so the pool is not copied, nor its memory doubled while it is, until then)
MAX_ROWS = 2**31  # items keep int32 row indices
_LAZY_FROM = 1 << 20  # bytes from which lazy_zeros maps memory itself


def lazy_zeros(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A zeroed array of a plain dtype whose memory is taken page by page as it is written.

    From 1 MiB on it is an anonymous memory map in base pages: numpy ``madvise``s its own
    allocations of 4 MiB or more for huge pages, so that the first write near each 2 MiB
    boundary of a table's mostly empty per-slot arrays took 2 MiB (measured: ~4 MiB
    of a 20k-item table's ~10 MiB, i.e. ~200 B per item, before). Smaller: ``np.zeros``.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < _LAZY_FROM or dtype.kind not in "biufc":
        return np.zeros(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype).reshape(shape)


class Pool:
    """Rows of one column type: ``data[rows]`` shaped ``[n, *shape]`` of ``dtype``."""

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.data = np.empty((0, *self.shape), self.dtype)
        self.refs = np.zeros(0, np.int64)  # one count per block
        self.free: list[int] = []

    @property
    def nbytes(self) -> int:
        """Bytes held by the rows and the block counts (object rows count their pointers)."""
        return int(self.data.nbytes + self.refs.nbytes)

    def new_block(self) -> int:
        """A free block's index (growing the pool by doubling when none is free)."""
        if not self.free:
            old = len(self.refs)
            grown = max(self._first_blocks(), 2 * old)
            if grown * BLOCK_ROWS > MAX_ROWS:
                raise InvalidArgumentError(
                    f"the pool of {self.dtype} {list(self.shape)} values would pass {MAX_ROWS} "
                    "rows (steps kept); keep fewer steps (smaller tables) or use more servers."
                )
            data = lazy_zeros((grown * BLOCK_ROWS, *self.shape), self.dtype)
            data[: old * BLOCK_ROWS] = self.data
            self.data = data
            self.refs = np.concatenate([self.refs, np.zeros(grown - old, np.int64)])
            self.free.extend(range(grown - 1, old - 1, -1))
        return self.free.pop()

    def _first_blocks(self) -> int:
        """Blocks of the first allocation: 4, or up to RESERVE_BYTES of a plain dtype (an
        object pool's allocation is written at once: it stays small)."""
        if self.dtype.kind not in "biufc":
            return 4
        row_bytes = max(1, self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64)))
        return int(min(256, max(4, RESERVE_BYTES // (BLOCK_ROWS * row_bytes))))

    def add_refs(self, rows: np.ndarray, delta: int) -> None:
        """Adds ``delta`` references per row (rows may repeat); frees blocks left at zero."""
        blocks = np.asarray(rows, np.int64).reshape(-1) // BLOCK_ROWS
        if blocks.size == 0:
            return
        np.add.at(self.refs, blocks, delta)
        if delta < 0:
            emptied = blocks[self.refs[blocks] == 0]
            if emptied.size:
                self.free.extend(np.unique(emptied).tolist())


@dataclass
class _Column:
    """One stream column: the pool its rows live in and the rows of its kept steps."""

    pool: int
    base: int = 0  # stream step index of rows[0]
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    block: int = -1  # open block, or -1
    fill: int = BLOCK_ROWS  # rows used in the open block


class ColumnStore:
    """The server's data: pools by column type and the writers' streams over them."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pools: list[Pool] = []
        self._pool_ids: dict[tuple[str, tuple[int, ...]], int] = {}
        self._streams: dict[int, dict[int, _Column]] = {}
        self._next_stream = 1

    def restore_pools(self, pools: list[Pool]) -> None:
        """Replaces every pool (a checkpoint's); the caller holds ``lock``."""
        self.pools = pools
        self._pool_ids = {(p.dtype.str, p.shape): i for i, p in enumerate(pools)}

    def pool_for(self, dtype: np.dtype, shape: tuple[int, ...]) -> int:
        """The id of the pool of ``(dtype, shape)`` rows, created on first use."""
        key = (np.dtype(dtype).str, tuple(shape))
        if key not in self._pool_ids:
            self._pool_ids[key] = len(self.pools)
            self.pools.append(Pool(np.dtype(dtype), tuple(shape)))
        return self._pool_ids[key]

    def open_stream(self) -> int:
        """A new stream id (a writer's handle)."""
        with self.lock:
            stream = self._next_stream
            self._next_stream += 1
            self._streams[stream] = {}
            return stream

    def _stream(self, stream: int) -> dict[int, _Column]:
        try:
            return self._streams[stream]
        except KeyError:
            raise InvalidArgumentError(
                f"stream {stream} is not open on this server (closed, or the server restarted); "
                "create a new writer."
            ) from None

    def append(self, stream: int, column: int, first_step: int, values: np.ndarray) -> None:
        """Stores ``values`` (``[T, *shape]``) as steps ``first_step..+T`` of a stream column."""
        with self.lock:
            columns = self._stream(stream)
            values = np.asarray(values)
            col = columns.get(column)
            pool_id = self.pool_for(values.dtype, values.shape[1:])
            if col is None:
                col = columns[column] = _Column(pool_id, base=first_step)
            elif col.pool != pool_id:
                pool = self.pools[col.pool]
                raise InvalidArgumentError(
                    f"column {column} of stream {stream} holds {pool.dtype} {list(pool.shape)} "
                    f"values; got {values.dtype} {list(values.shape[1:])}. Keep each column's "
                    "dtype and shape fixed."
                )
            expected = col.base + len(col.rows)
            if first_step != expected:
                raise InvalidArgumentError(
                    f"column {column} of stream {stream} expects step {expected} next; got "
                    f"{first_step}. Send each column's steps once and in order."
                )
            pool = self.pools[pool_id]
            new_rows = np.empty(len(values), np.int64)
            done = 0
            while done < len(values):
                if col.fill == BLOCK_ROWS:
                    if col.block >= 0:
                        pool.add_refs(np.array([col.block * BLOCK_ROWS]), -1)
                    col.block = pool.new_block()
                    col.fill = 0
                    pool.refs[col.block] += 1  # the stream's hold on its open block
                take = min(BLOCK_ROWS - col.fill, len(values) - done)
                start = col.block * BLOCK_ROWS + col.fill
                pool.data[start : start + take] = values[done : done + take]
                new_rows[done : done + take] = np.arange(start, start + take)
                col.fill += take
                done += take
            pool.add_refs(new_rows, +1)
            col.rows = np.concatenate([col.rows, new_rows])

    def rows(self, stream: int, column: int, steps: np.ndarray) -> tuple[int, np.ndarray]:
        """The pool id and rows of a stream column's ``steps`` (any int array)."""
        columns = self._stream(stream)
        col = columns.get(column)
        steps = np.asarray(steps, np.int64)
        if col is None:
            raise InvalidArgumentError(
                f"column {column} of stream {stream} has no data; append before creating items."
            )
        local = steps - col.base
        if local.size and (local.min() < 0 or local.max() >= len(col.rows)):
            raise InvalidArgumentError(
                f"an item references steps {int(steps.min())}..{int(steps.max())} of column "
                f"{column}, but only steps {col.base}..{col.base + len(col.rows) - 1} are kept; "
                "the reference expired. Raise num_keep_alive_refs or create items sooner."
            )
        return col.pool, col.rows[local]

    def release(self, stream: int, before: dict[int, int]) -> None:
        """Drops the stream's hold on every step ``< before[column]`` of each column."""
        with self.lock:
            columns = self._stream(stream)
            for column, step in before.items():
                col = columns.get(int(column))
                if col is None or step <= col.base:
                    continue
                cut = min(int(step) - col.base, len(col.rows))
                self.pools[col.pool].add_refs(col.rows[:cut], -1)
                col.rows = col.rows[cut:]
                col.base += cut

    def close_stream(self, stream: int) -> None:
        """Drops every hold of a stream (its items keep their rows)."""
        with self.lock:
            columns = self._streams.pop(stream, {})
            for col in columns.values():
                pool = self.pools[col.pool]
                pool.add_refs(col.rows, -1)
                if col.block >= 0:
                    pool.add_refs(np.array([col.block * BLOCK_ROWS]), -1)

    def nbytes(self) -> int:
        """Bytes of every pool."""
        with self.lock:
            return sum(pool.nbytes for pool in self.pools)
