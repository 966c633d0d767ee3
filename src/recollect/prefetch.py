"""Framework-free helpers shared by the adapters: concurrent sampling and a prefetch thread.

``sample_concurrent`` lets several reader threads gather at the same time,
through the table's public draw protocol: the windows are drawn under the
table lock (``buffer.table.draw``), the numpy gather (which releases the GIL)
runs outside it (``buffer.gather``), and ``buffer.table.is_stale`` checks that
no concurrent write overwrote a drawn step during the gather. If one did, the
batch is drawn again the ordinary (fully locked) way, so a sample is always a
consistent snapshot; there is no retry loop.

``draw_concurrent`` splits that into the locked draw and a ``finish`` step,
so that :class:`Prefetcher` can draw batches in a fixed order and gather them
on several threads, the consumer's included. It stops cleanly on
``close()``, when the buffer reports ``closed``, or when a producer raises
(the error is re-raised in the consumer).

With a rate limiter on the buffer, a draw waits until the limiter allows it
(a learner blocks instead of failing); a draw made for a :class:`Prefetcher`
waits in short slices so that closing the iterator ends it, and closing the
buffer wakes it with StateError, which ends the iteration cleanly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.buffers.sample import Sample
from recollect.errors import InvalidArgumentError, RateLimiterTimeout, StateError
from recollect.service.client import TableHandle
from recollect.service.stream import SampleStream, check_batches_per_request, check_max_in_flight
from recollect.specs import FlatSpec

__all__ = [
    "Prefetcher",
    "SampleSource",
    "buffer_closed",
    "check_batches_per_request",
    "check_max_in_flight",
    "check_prefetch",
    "check_threads",
    "draw_concurrent",
    "flat_spec_of",
    "outer_shape",
    "sample_concurrent",
]

_POLL_S = 0.05
_local = threading.local()  # .stop: the Event of the Prefetcher drawing on this thread


def buffer_closed(buffer: Any) -> bool:
    """Whether ``buffer`` says it is closed (``buffer.closed``; False when it has no such flag)."""
    return bool(getattr(buffer, "closed", False))


def flat_spec_of(buffer: Any) -> FlatSpec:
    """The buffer's flattened spec (``flat_spec``, or built from ``data_spec``)."""
    flat = getattr(buffer, "flat_spec", None)
    return flat if isinstance(flat, FlatSpec) else FlatSpec(buffer.data_spec)


def outer_shape(sample_batch_size: int | None, num_steps: int | None) -> list[int]:
    """Leading dims of an adapter's elements: ``[batch]``, ``[num_steps]``, both or none."""
    return [d for d in (sample_batch_size, num_steps) if d is not None]


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


class SampleSource:
    """Where an adapter's batches come from: a local buffer or a served table.

    For a :class:`~recollect.ReplayBuffer` (or anything with ``sample``),
    :meth:`draw` is :func:`draw_concurrent`. For a served table's
    :class:`~recollect.service.TableHandle` (``client.table(name)``) it takes
    the next batch of a :class:`~recollect.service.SampleStream`, which keeps
    ``max_in_flight`` sample requests outstanding (Reverb's
    ``max_in_flight_samples_per_worker``); the batch is ready when ``finish``
    runs. Draws must not run concurrently (a :class:`Prefetcher` runs them one
    at a time); ``finish`` may.

    Args:
        buffer: a ReplayBuffer, anything with ``sample``, or a TableHandle.
        batch_size: windows per batch.
        num_steps: window length, or None.
        max_in_flight: outstanding requests to a served table, >= 1 (a local
            buffer ignores it).
        batches_per_request: batches each request to a served table asks
            for, >= 1 (a local buffer ignores it).

    Raises:
        InvalidArgumentError: ``max_in_flight`` or ``batches_per_request`` < 1.
    """

    def __init__(
        self,
        buffer: Any,
        batch_size: int,
        num_steps: int | None,
        max_in_flight: int = 2,
        batches_per_request: int = 1,
    ) -> None:
        self.buffer = buffer
        self.batch_size = batch_size
        self.num_steps = num_steps
        self.max_in_flight = check_max_in_flight(max_in_flight)
        self.batches_per_request = check_batches_per_request(batches_per_request)
        self._stream: SampleStream | None = None
        if isinstance(buffer, TableHandle):
            self._stream = SampleStream(
                buffer,
                batch_size,
                num_steps,
                max_in_flight=self.max_in_flight,
                batches_per_request=self.batches_per_request,
            )

    def draw(self) -> Callable[[], Any]:
        """Draws a batch now; returns ``finish()``, which returns it (as :func:`draw_concurrent`).

        Raises:
            StopIteration: the stream of a served table was closed.
            Any error of the sample (e.g. NotEnoughDataError), with its type.
        """
        if self._stream is None:
            return draw_concurrent(self.buffer, self.batch_size, self.num_steps)
        sample = next(self._stream)
        return lambda: sample

    def closed(self) -> bool:
        """Whether the buffer (or the served table's client) says it is closed."""
        return buffer_closed(self.buffer)

    def close(self) -> None:
        """Stops issuing sample requests to a served table (idempotent)."""
        if self._stream is not None:
            self._stream.close()


def draw_concurrent(buffer: Any, batch_size: int, num_steps: int | None) -> Callable[[], Any]:
    """Draws a batch now and returns ``finish()``, which gathers it (GIL released) and returns it.

    ``draw_concurrent(buffer, b, n)()`` equals ``buffer.sample(b, n)``: same
    result distribution, shapes and errors. For a :class:`ReplayBuffer` the
    windows are drawn under the table lock now (``buffer.table.draw``), so
    draws made one after another consume the rng in that order wherever
    ``finish`` then runs; ``finish`` gathers outside the lock and, when
    ``buffer.table.is_stale(draw)`` says a write overwrote a drawn step
    meanwhile, samples again with the lock held. Other objects that merely
    have ``sample`` (e.g. a TransitionBuffer) are sampled entirely here.
    """
    if not isinstance(buffer, ReplayBuffer):
        # e.g. TransitionBuffer.sample(batch_size) has no num_steps.
        s = buffer.sample(batch_size) if num_steps is None else buffer.sample(batch_size, num_steps)
        return lambda: s
    table = buffer.table
    draw = _draw_waiting(table, batch_size, num_steps, getattr(_local, "stop", None))

    def finish() -> Sample:
        sample = buffer.gather(draw)
        if table.is_stale(draw):
            return buffer.sample(batch_size, num_steps)
        return sample

    return finish


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


def sample_concurrent(buffer: Any, batch_size: int, num_steps: int | None) -> Any:
    """``buffer.sample(batch_size, num_steps)`` with the numpy gather outside the buffer lock.

    See :func:`draw_concurrent`; several threads may call this at once.
    """
    return draw_concurrent(buffer, batch_size, num_steps)()


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
    ``on_close()`` runs when the prefetcher is closed or collected (e.g.
    :meth:`SampleSource.close`).
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
