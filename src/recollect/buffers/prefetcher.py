"""Prefetcher: keeps sampled batches ready, produced on daemon threads, handed out in draw order.

The one thread layer between a local buffer and a reader (see
:meth:`recollect.buffers.source.SampleSource.stream`); :func:`prefetched` builds it
over any :class:`~recollect.buffers.source.SampleSource`'s ``draw``. A draw made on a
prefetch thread from a rate-limited table waits in short slices
(:func:`draw_waiting`), so that closing the prefetcher ends it.

Freshness: the items kept ready are drawn ahead by the depth the caller asked
for (``prefetch``), and are handed out even when the buffer changed after their
draw (a write, ``clear``, ``delete``, ``update_priorities``, load: all alike);
a reader that needs every batch drawn after the buffer's latest change calls
``sample`` itself. A draw function may tag its items and let the consumer drop stale
ones (the eager ``tf.data`` iterator checks its buffer's ``table.version``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from recollect.arguments import positive_int
from recollect.errors import RateLimiterTimeout, StateError

__all__ = [
    "Prefetcher",
    "check_prefetch",
    "check_threads",
    "draw_stopped_by",
    "draw_waiting",
    "prefetched",
]

_POLL_S = 0.05
_local = threading.local()  # .stop: the Event of the Prefetcher drawing on this thread


def check_prefetch(prefetch: Any) -> int:
    """Validates a prefetch depth (int >= 1)."""
    return positive_int("prefetch", prefetch, "batches kept ready")


def check_threads(num_threads: Any) -> int:
    """Validates a number of producer threads (int >= 1)."""
    return positive_int("num_threads", num_threads, "producer threads")


def draw_waiting(table: Any, batch_size: int, num_steps: int | None) -> Any:
    """``table.draw(batch_size, num_steps)``; on a prefetch thread of a rate-limited table,
    waits in slices and raises StateError once the prefetcher is closed."""
    stop = getattr(_local, "stop", None)
    if stop is None or table.rate_limiter is None:  # the common case, one call deep
        return table.draw(batch_size, num_steps)
    return _draw_waiting(table, batch_size, num_steps, stop)


def draw_stopped_by(stop: Any, draw: Callable[[], Any]) -> Any:
    """``draw()`` on this thread as a prefetch thread's: a rate-limited draw in it waits in
    slices and raises StateError once ``stop.is_set()`` (an object with that method)."""
    previous = getattr(_local, "stop", None)
    _local.stop = stop
    try:
        return draw()
    finally:
        _local.stop = previous


def _draw_waiting(table: Any, batch_size: int, num_steps: int | None, stop: Any) -> Any:
    """``table.draw``; with a rate limiter and a prefetcher's ``stop`` event, waits in slices
    and raises StateError once ``stop`` is set (closing an iterator ends a blocked draw)."""
    if stop is None or table.rate_limiter is None:
        return table.draw(batch_size, num_steps)
    while True:
        if stop.is_set():
            raise StateError("the prefetcher was closed while its draw waited on the rate limiter.")
        try:
            return table.draw(batch_size, num_steps, timeout=4 * _POLL_S)
        except RateLimiterTimeout:
            if threading.active_count() == 1:
                raise
            time.sleep(0)  # let the writer that will unblock us run


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()
_MISSING = object()


class _Pipeline:
    """State shared by a :class:`Prefetcher` and its threads (they never reference the iterator)."""

    def __init__(
        self,
        draw: Callable[[], Callable[[], Any]],
        depth: int,
        should_stop: Callable[[], bool],
    ) -> None:
        self.draw, self.depth, self.should_stop = draw, depth, should_stop
        self.cond = threading.Condition()
        self.draw_lock = threading.Lock()
        self.stop = threading.Event()
        self.issued = 0  # tickets drawn so far
        self.next = 0  # ticket handed out next
        self.ready: dict[int, Any] = {}  # ticket -> item, _Raised or _END

    def produce_one(self) -> bool:
        """Draws the next ticket and finishes its item; False once the pipeline ends or errs."""
        finish = None
        with self.draw_lock:
            if self.stop.is_set():
                return False
            ticket = self.issued
            self.issued += 1
            _local.stop = self.stop
            try:
                item = _END if self.should_stop() else _MISSING
                if item is _MISSING:
                    finish = self.draw()
            except BaseException as err:  # handed to the consumer
                item = self._ended_by(err)
            finally:
                _local.stop = None
        if finish is not None:
            try:
                item = finish()
            except BaseException as err:
                item = self._ended_by(err)
        with self.cond:
            if self.stop.is_set():  # closed meanwhile: nothing more is handed out
                return False
            self.ready[ticket] = item
            self.cond.notify_all()
        return item is not _END and not isinstance(item, _Raised)

    def _ended_by(self, err: BaseException) -> Any:
        """_END when ``err`` is the StateError of a close (buffer or prefetcher), else _Raised."""
        if isinstance(err, StateError) and (self.stop.is_set() or self.should_stop()):
            return _END
        return _Raised(err)

    def work(self) -> None:
        """A producer thread: keeps ``depth`` tickets drawn ahead of the consumer."""
        while True:
            with self.cond:
                while not self.stop.is_set() and self.issued - self.next >= self.depth:
                    self.cond.wait(_POLL_S)
                if self.stop.is_set():
                    return
            if not self.produce_one():
                return


class Prefetcher(Iterator[Any]):
    """Keeps up to ``depth`` items ready, produced on daemon threads and handed out in draw order.

    ``draw()`` runs one call at a time, in ticket order, and returns
    ``finish``; ``finish()`` (the gather and conversion, mostly without the
    GIL) runs concurrently on the ``threads`` producer threads. When the next
    item is not ready, the consumer does not idle: it draws and finishes a
    later item itself, so a consumer faster than the producers samples at the
    speed of two threads instead of paying a thread hand-off per item. Items
    are handed out in the order of their draws, so with a seeded rng and a
    buffer not written meanwhile the sequence equals calling ``sample`` in a
    loop, for any number of threads.

    Iteration ends when :meth:`close` is called (from any thread) or when
    ``should_stop()`` becomes true; an exception raised by ``draw`` or
    ``finish`` is re-raised by ``__next__`` (in order) and ends the iteration.
    ``on_close()`` runs when the prefetcher is closed or collected.
    """

    def __init__(
        self,
        draw: Callable[[], Callable[[], Any]],
        depth: int,
        should_stop: Callable[[], bool],
        threads: int = 1,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._pipeline = _Pipeline(draw, depth, should_stop)
        self._on_close = on_close
        self._done = False
        # The threads hold no reference to this object, so an abandoned iterator is
        # garbage collected and its __del__ stops them.
        self._workers = [
            threading.Thread(
                target=self._pipeline.work, name=f"recollect-prefetch-{k}", daemon=True
            )
            for k in range(threads)
        ]
        for worker in self._workers:
            worker.start()

    def __next__(self) -> Any:
        p = self._pipeline
        while not self._done:
            with p.cond:
                if p.stop.is_set():
                    break
                item = p.ready.pop(p.next, _MISSING)
                if item is not _MISSING:
                    p.next += 1
                    p.cond.notify_all()
                elif p.issued - p.next > p.depth:  # enough in flight: wait for the producers
                    p.cond.wait(_POLL_S)
                    continue
            if item is _MISSING:
                p.produce_one()  # help: finish a later item instead of idling
                continue
            if item is _END:
                break
            if isinstance(item, _Raised):
                self._end()  # the producers stop too
                raise item.error
            return item
        self._end()
        raise StopIteration

    def _end(self) -> None:
        self._done = True
        self._pipeline.stop.set()
        if self._on_close is not None:
            self._on_close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._pipeline.stop.is_set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stops the threads and drops prepared items; idempotent."""
        p = self._pipeline
        p.stop.set()
        with p.cond:
            p.ready.clear()
            p.cond.notify_all()
        if self._on_close is not None:
            self._on_close()
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join(timeout_s)

    def __del__(self) -> None:
        self._pipeline.stop.set()
        on_close = getattr(self, "_on_close", None)
        if on_close is not None:
            on_close()


def prefetched(
    source: Any,
    batch_size: int,
    num_steps: int | None,
    *,
    convert: Callable[[Any], Any] | None = None,
    prefetch: int = 2,
    num_threads: int = 1,
) -> Prefetcher:
    """A :class:`Prefetcher` of ``convert(source.draw(batch_size, num_steps)())``.

    What a local source's :meth:`~recollect.buffers.source.SampleSource.stream`
    returns: ``num_threads`` threads keep ``prefetch`` batches ready; the
    iteration ends once ``source.closed`` is true.

    Raises:
        InvalidArgumentError: ``prefetch`` or ``num_threads`` < 1.
    """
    depth, threads = check_prefetch(prefetch), check_threads(num_threads)

    def draw() -> Callable[[], Any]:
        finish = source.draw(batch_size, num_steps)
        if convert is None:
            return finish
        return lambda: convert(finish())

    return Prefetcher(draw, depth, lambda: bool(source.closed), threads)
