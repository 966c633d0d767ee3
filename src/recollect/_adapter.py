"""Framework-free helpers shared by the adapters: concurrent sampling and a prefetch thread.

``sample_concurrent`` lets several reader threads gather at the same time:
the windows are drawn under the buffer lock, the numpy gather (which releases
the GIL) runs outside it, and the buffer lock is taken once more to check
that no concurrent write overwrote a drawn slot during the gather. If one did,
the batch is drawn again the ordinary (fully locked) way, so a sample is always
a consistent snapshot; there is no retry loop.

``Prefetcher`` runs a producer on a daemon thread into a bounded queue and
stops cleanly on ``close()``, when the buffer reports ``closed``, or when the
producer raises (the error is re-raised in the consumer).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.buffers.sample import Sample
from recollect.errors import InvalidArgumentError
from recollect.storage.ring import RingStorage

__all__ = [
    "Prefetcher",
    "buffer_closed",
    "check_prefetch",
    "check_threads",
    "sample_concurrent",
]

_POLL_S = 0.05


def buffer_closed(buffer: Any) -> bool:
    """Whether ``buffer`` says it is closed (``buffer.closed``; False when it has no such flag)."""
    return bool(getattr(buffer, "closed", False))


def check_prefetch(prefetch: Any) -> int:
    """Validates a prefetch depth (int >= 1)."""
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
        raise InvalidArgumentError(
            f"`prefetch` must be an int >= 1 (batches kept ready); got prefetch={prefetch!r}."
        )
    return prefetch


def check_threads(num_threads: Any) -> int:
    """Validates a number of producer threads (int >= 1)."""
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise InvalidArgumentError(
            f"`num_threads` must be an int >= 1 (producer threads); got {num_threads!r}."
        )
    return num_threads


def _plain_ring_buffer(buffer: Any) -> bool:
    """A ReplayBuffer whose sampling and slot layout this module knows (ring or memmap storage)."""
    cls = type(buffer)
    return (
        isinstance(buffer, ReplayBuffer)
        and cls.sample is ReplayBuffer.sample
        and cls._gather is ReplayBuffer._gather
        and isinstance(getattr(buffer, "_storage", None), RingStorage)
    )


def sample_concurrent(buffer: Any, batch_size: int, num_steps: int | None) -> Any:
    """``buffer.sample(batch_size, num_steps)`` with the numpy gather outside the buffer lock.

    Same result distribution, shapes and errors as :meth:`ReplayBuffer.sample`.
    Other buffers (subclasses overriding ``sample``, frame-stack storage whose
    stacks read older slots, objects that merely have ``sample``) are sampled
    with their own, fully locked ``sample``.
    """
    if not _plain_ring_buffer(buffer):
        # e.g. TransitionBuffer.sample(batch_size) has no num_steps.
        return (
            buffer.sample(batch_size) if num_steps is None else buffer.sample(batch_size, num_steps)
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        return buffer.sample(batch_size, num_steps)  # raises the usual error
    n, within = buffer._resolve_window(num_steps, None)
    with buffer._lock:
        draw = buffer._draw(batch_size, n, within, {})
        t_before = buffer._index.t
    leaves = buffer._gather(draw, n, time_axis=num_steps is not None)
    with buffer._lock:
        t_after = buffer._index.t
    # A write at time u overwrites the slot of time u - max_length.
    if t_after != t_before and int(draw.times.min()) < t_after - buffer.max_length:
        return buffer.sample(batch_size, num_steps)
    ids = draw.times * buffer.num_envs + draw.rows
    return Sample(buffer._flat.unflatten(leaves), ids, draw.probabilities, draw.weights)


def _put(q: queue.Queue[Any], stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _run(
    produce: Callable[[], Any],
    should_stop: Callable[[], bool],
    q: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    try:
        while not stop.is_set() and not should_stop():
            if not _put(q, stop, produce()):
                return
    except BaseException as err:  # handed to the consumer
        _put(q, stop, _Raised(err))
        return
    _put(q, stop, _END)


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class Prefetcher(Iterator[Any]):
    """Calls ``produce()`` on a daemon thread, keeping up to ``depth`` results ready.

    Iteration ends when :meth:`close` is called (from any thread) or when
    ``should_stop()`` becomes true; an exception raised by ``produce`` is
    re-raised by ``__next__`` and ends the iteration.
    """

    def __init__(
        self,
        produce: Callable[[], Any],
        depth: int,
        should_stop: Callable[[], bool],
        threads: int = 1,
    ) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._ended = 0
        self._threads = threads
        # The threads hold no reference to this object, so an abandoned iterator is
        # garbage collected and its __del__ stops them.
        self._workers = [
            threading.Thread(
                target=_run,
                args=(produce, should_stop, self._queue, self._stop),
                name=f"recollect-prefetch-{k}",
                daemon=True,
            )
            for k in range(threads)
        ]
        for worker in self._workers:
            worker.start()

    def __next__(self) -> Any:
        while not self._done:
            if self._stop.is_set():
                break
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if item is _END:
                self._ended += 1
                if self._ended < self._threads:
                    continue  # other producers may still deliver batches
                break
            if isinstance(item, _Raised):
                self._done = True
                self._stop.set()  # the other producers stop too
                raise item.error
            return item
        self._done = True
        self._stop.set()
        raise StopIteration

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._stop.is_set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops the thread and drops prefetched results; idempotent."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join(timeout_s)

    def __del__(self) -> None:
        self._stop.set()
