"""Row gathers for ring storage: ``np.take`` for row leaves, split over threads when large.

A :class:`Gatherer` holds everything gathers keep between calls: recycled
output blocks, a small pool of copy threads and the measured choice between
one and several threads. Each storage owns one (or is given a shared one), so
several buffers, tables or shards in one process share no hidden state.

``np.take(view, index, axis=0)`` copies each row with one ``memmove`` and is
several times faster than fancy indexing for ``[N, k]`` leaves (fancy indexing
walks the row element by element); with ``out=`` it is as fast or faster for
scalar leaves too (one pass, no temporary). All leaves of one gather land in ONE block of memory,
recycled once every view of it is gone (:class:`_Blocks`): fresh multi-MiB
arrays cost a page fault per 4 KiB, as much as the copy itself.

numpy releases the GIL while it copies, so a large (>= 4 MiB) gather, e.g.
image observations, can be cut into chunks that the calling thread and a
small persistent pool of worker threads copy concurrently into one
preallocated output. Chunks are claimed one at a time, so a worker that is
not scheduled in time costs nothing: the calling thread then copies the
remaining chunks itself and never waits for a worker that has not started.
A worker preempted in the middle of a chunk does make the caller wait, so
large gathers pick one or several threads by measured throughput
(:class:`ThreadChooser`).

``RECOLLECT_GATHER_THREADS`` (default: usable CPUs, at most 4) sets the default
number of threads copying one gather, the calling thread included; 1 disables
the pool. After ``fork`` a child's gatherers start new threads and locks.
"""

from __future__ import annotations

import collections
import ctypes
import math
import os
import queue
import statistics
import sys
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np

__all__ = ["ALIGN_BYTES", "PARALLEL_MIN_BYTES", "ChunkPool", "Gatherer", "ThreadChooser"]

#: Leaf gathers moving at least this many bytes may be split over threads.
PARALLEL_MIN_BYTES = 1 << 22
#: Target bytes per chunk of a split gather.
CHUNK_BYTES = 1 << 20
MAX_CHUNKS = 32


def _thread_count() -> int:
    env = os.environ.get("RECOLLECT_GATHER_THREADS")
    if env:
        return max(1, int(env))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


class _Job:
    """One split task: chunks ``[bounds[k], bounds[k + 1])`` claimed under a lock."""

    def __init__(self, fn: Callable[[int, int], object], bounds: list[int]) -> None:
        self.fn: Callable[[int, int], object] | None = fn
        self.bounds = bounds
        self.chunks = len(bounds) - 1
        self.claimed = 0
        self.left = self.chunks
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while True:
            with self.lock:
                k, fn = self.claimed, self.fn
                if k >= self.chunks or fn is None:
                    return
                self.claimed = k + 1
            try:
                fn(self.bounds[k], self.bounds[k + 1])
            except BaseException as err:  # re-raised in the calling thread
                self.error = err
            with self.lock:
                self.left -= 1
                if self.left == 0:
                    self.done.set()


class ChunkPool:
    """Daemon worker threads, started on first use, that help the calling thread run
    the chunks of one task; :meth:`stop` ends them.

    Chunks are claimed one at a time, so a worker that is not scheduled in time
    costs nothing: the calling thread then runs the remaining chunks itself and
    never waits for a worker that has not started.

    Args:
        threads: threads running one task, the caller included.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._started = False
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            if self._started:
                return
            for k in range(self.threads - 1):
                name = f"recollect-pool-{k}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
            self._started = True

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job.run()

    def stop(self) -> None:
        """Ends the worker threads once they finish their current chunk."""
        if self._started:
            for _ in range(self.threads - 1):
                self._queue.put(None)

    def run(self, fn: Callable[[int, int], object], bounds: list[int]) -> None:
        """Calls ``fn(bounds[k], bounds[k + 1])`` for every chunk ``k``, on this thread
        and the workers; returns when all are done (re-raises the first error)."""
        if not self._started:
            self._start()
        job = _Job(fn, bounds)
        for _ in range(min(self.threads, job.chunks) - 1):
            self._queue.put(job)
        job.run()
        job.done.wait()
        job.fn = None  # stale queue entries must not pin the task's arrays
        if job.error is not None:
            raise job.error

    def take(self, src: np.ndarray, flat: np.ndarray, out: np.ndarray, nbytes: int) -> None:
        """``np.take(src, flat, axis=0, out=out)`` copied by several threads."""
        n = len(flat)
        chunks = max(self.threads, min(MAX_CHUNKS, nbytes // CHUNK_BYTES, n))

        def copy(a: int, b: int) -> None:  # internal, in-range indices: "clip" skips a pass
            np.take(src, flat[a:b], axis=0, out=out[a:b], mode="clip")

        self.run(copy, [n * k // chunks for k in range(chunks + 1)])


class _Blocks:
    """Output memory of large gathers, recycled once the caller dropped every view of it.

    A fresh multi-MiB array costs a page fault per 4 KiB page (as much as
    copying the data), and several such arrays per sample make glibc return
    the memory to the OS after each sample. So a gather takes ONE block for
    all its leaves, and blocks are cached: a block whose only reference is
    this cache (CPython refcount; every leaf returned is a view holding one)
    is handed out again. The cache keeps every block still in use (up to
    ``max_cached_bytes`` in all), so that any number of prefetch queues or
    kept batches recycle their blocks once released, plus at most ``keep``
    free spares, oldest dropped first. Blocks are ``min_bytes`` to
    ``max_bytes`` each; other sizes are plain allocations.
    """

    def __init__(
        self,
        keep: int = 8,
        min_bytes: int = 1 << 18,
        max_bytes: int = 1 << 28,
        max_cached_bytes: int = 1 << 30,
    ) -> None:
        self.keep, self.min_bytes, self.max_bytes = keep, min_bytes, max_bytes
        self.max_cached_bytes = max_cached_bytes
        self.blocks: list[np.ndarray] = []
        self.lock = threading.Lock()
        # Refcounts are exact only with the GIL (free-threaded builds defer them).
        self.enabled = getattr(sys, "_is_gil_enabled", lambda: True)()

    def get(self, nbytes: int) -> np.ndarray:
        """A ``ALIGN_BYTES``-aligned uint8 block of ``nbytes`` (recycled when possible)."""
        if not self.min_bytes <= nbytes <= self.max_bytes or not self.enabled:
            return _aligned(np.empty(nbytes + ALIGN_BYTES, np.uint8), nbytes)
        with self.lock:
            blocks = self.blocks  # raw allocations: every view returned has one as its base
            raw = None
            for i in range(len(blocks)):
                # 2 = the list's reference + getrefcount's argument: no view is alive.
                fits = nbytes + ALIGN_BYTES <= blocks[i].size <= 2 * nbytes + ALIGN_BYTES
                if fits and sys.getrefcount(blocks[i]) == 2:
                    raw = blocks.pop(i)
                    break
            if raw is None:
                raw = np.empty(nbytes + ALIGN_BYTES, np.uint8)
            blocks.append(raw)
            if len(blocks) > self.keep:
                self._trim()
            return _aligned(raw, nbytes)

    def _trim(self) -> None:
        """Drops free blocks beyond ``keep`` spares, then the oldest beyond the byte cap."""
        blocks = self.blocks
        free = [i for i in range(len(blocks)) if sys.getrefcount(blocks[i]) == 2]
        drop = set(free[: max(0, len(free) - self.keep)])
        total = sum(b.nbytes for i, b in enumerate(blocks) if i not in drop)
        for i in range(len(blocks) - 1):  # the block just handed out (last) stays
            if total <= self.max_cached_bytes:
                break
            if i not in drop:
                drop.add(i)
                total -= blocks[i].nbytes
        if drop:
            self.blocks = [b for i, b in enumerate(blocks) if i not in drop]


#: Alignment of gathered outputs: TF and XLA wrap aligned numpy buffers instead of copying them.
ALIGN_BYTES = 64


def _aligned(raw: np.ndarray, nbytes: int) -> np.ndarray:
    """The ``nbytes`` of ``raw`` from its first ``ALIGN_BYTES``-aligned address (a view)."""
    # the address through ctypes.c_char: ~0.8 us, against ~2 us for raw.ctypes.data
    skip = -ctypes.addressof(ctypes.c_char.from_buffer(raw.data)) % ALIGN_BYTES
    return raw[skip : skip + nbytes]


class ThreadChooser:
    """Picks one or several threads for a large gather by measured throughput.

    Splitting pays when another core is idle; on a loaded machine a worker
    that is preempted mid-chunk makes the caller wait, and one thread is
    faster. So each size class (power of two of the bytes) keeps the last
    ``window`` rates (bytes/s) of each mode, alternates modes until each has
    ``warmup`` of them, then uses the mode with the higher median rate and
    tries the other one every ``explore``-th gather. A tried mode that beats
    the used mode's median is tried again on the next gather, so a mode that
    measured badly while a process warmed up takes over within a few gathers
    once it is faster (with ``explore`` alone, three tries 64 gathers apart).
    Results are identical either way; only the speed differs.
    """

    def __init__(self, explore: int = 64, window: int = 5, warmup: int = 3) -> None:
        self.explore, self.window, self.warmup = explore, window, warmup
        self.rates: dict[int, tuple[collections.deque, collections.deque]] = {}
        self.again: set[int] = set()  # size classes whose other mode is tried next
        self.calls = 0

    def split(self, nbytes: int) -> bool:
        key = nbytes.bit_length()
        rates = self.rates.get(key)
        if rates is None:
            w = self.window
            rates = self.rates[key] = (collections.deque(maxlen=w), collections.deque(maxlen=w))
        self.calls += 1
        single, split = rates
        if len(single) < self.warmup or len(split) < self.warmup:
            return len(split) < len(single)
        best = statistics.median(split) > statistics.median(single)
        if key in self.again:
            self.again.discard(key)
            return not best
        return best != (self.calls % self.explore == 0)

    def record(self, nbytes: int, split: bool, seconds: float) -> None:
        key = nbytes.bit_length()
        used, other = self.rates[key][split], self.rates[key][not split]
        rate = nbytes / max(seconds, 1e-9)
        used.append(rate)
        if len(used) > self.warmup and len(other) >= self.warmup:
            rival = statistics.median(other)
            if statistics.median(used) <= rival < rate:
                self.again.add(key)  # a tried mode beat the used one: try it again


class Gatherer:
    """Gathers rows of ring arrays into recycled, aligned blocks, large ones on several threads.

    Args:
        threads: threads copying one large gather, the caller included (default:
            ``RECOLLECT_GATHER_THREADS`` or the usable CPUs, at most 4); 1 never splits.

    One gatherer may be shared by several storages (pass it in); its methods
    are thread-safe. Its worker threads end when it is garbage collected.
    """

    def __init__(self, threads: int | None = None) -> None:
        self.threads = _thread_count() if threads is None else max(1, int(threads))
        self.reset()
        _LIVE.add(self)

    def reset(self) -> None:
        """New threads, block cache and chooser (after a fork: the old ones are not usable)."""
        self.pool = ChunkPool(self.threads)
        self.blocks = _Blocks()
        self.chooser = ThreadChooser()
        weakref.finalize(self, self.pool.stop)

    def take_large(self, view: np.ndarray, flat: np.ndarray, dst: np.ndarray, size: int) -> None:
        split = self.chooser.split(size)
        t0 = time.perf_counter()
        if split:
            self.pool.take(view, flat, dst, size)
        else:
            np.take(view, flat, axis=0, out=dst, mode="clip")
        self.chooser.record(size, split, time.perf_counter() - t0)

    def gather(self, views: list[np.ndarray], index: np.ndarray) -> list[np.ndarray]:
        """Rows ``view[index]`` of ``[N, *shape]`` arrays; returns ``[*index.shape, *shape]`` each.

        ``index`` holds int64 row numbers in ``[0, N)`` (any shape). The results
        equal ``view[index]`` and are views into one new (or recycled) block of
        ``ALIGN_BYTES``-aligned memory.
        """
        return gather_leaves(self, views, index)


#: Every live gatherer, so that a forked child gives each new threads and locks.
_LIVE: weakref.WeakSet[Gatherer] = weakref.WeakSet()


def _after_fork() -> None:
    for gatherer in list(_LIVE):
        gatherer.reset()  # the parent's workers do not exist in the child; locks may be held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def gather_leaves(
    gatherer: Gatherer, views: list[np.ndarray], index: np.ndarray
) -> list[np.ndarray]:
    """:meth:`Gatherer.gather` (see there)."""
    flat = index
    if index.ndim != 1 or index.dtype != np.intp or not index.flags.c_contiguous:
        flat = np.ascontiguousarray(index, dtype=np.intp).reshape(-1)
    n = len(flat)
    sizes, offsets, total = [], [], 0
    for v in views:  # a plain loop: ~2 us less than comprehensions + accumulate
        size = n * v.itemsize * math.prod(v.shape[1:])
        sizes.append(size)
        offsets.append(total)
        total += (size + ALIGN_BYTES - 1) & ~(ALIGN_BYTES - 1)
    block = gatherer.blocks.get(total)
    split = gatherer.threads > 1
    out = []
    reshape = index.ndim != 1
    for view, size, offset in zip(views, sizes, offsets, strict=False):
        # one constructor call, not slice + view + reshape (~1 us each, per leaf)
        dst = np.ndarray((n, *view.shape[1:]), view.dtype, buffer=block, offset=offset)
        if size >= PARALLEL_MIN_BYTES and split:
            gatherer.take_large(view, flat, dst, size)
        else:  # internal, in-range indices: "clip" skips the bounds pass (and a copy of out)
            view.take(flat, axis=0, out=dst, mode="clip")
        out.append(dst.reshape((*index.shape, *view.shape[1:])) if reshape else dst)
    return out
