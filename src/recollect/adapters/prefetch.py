"""Framework-free helpers shared by the adapters: reading a SampleSource concurrently.

Every reader samples through the :class:`~recollect.buffers.source.SampleSource`
protocol (re-exported here): a local :class:`~recollect.ReplayBuffer`, a
served table's :class:`~recollect.service.TableHandle`, or a user's class.
``source.stream(...)`` is the one thread layer between a source and an
adapter: a :class:`Prefetcher` for a local buffer, a
:class:`~recollect.service.SampleStream` for a served table.

``sample_concurrent`` lets several reader threads gather at the same time,
through ``source.draw``: a :class:`~recollect.ReplayBuffer` draws the windows
under the table lock (``buffer.table.draw``), gathers them outside it (the
numpy gather releases the GIL) and checks with ``buffer.table.is_stale`` that
no concurrent write overwrote a drawn step meanwhile. If one did, the batch
is drawn again the ordinary (fully locked) way, so a sample is always a
consistent snapshot; there is no retry loop.

``draw_concurrent`` splits that into the draw and a ``finish`` step, so that
:class:`Prefetcher` can draw batches in a fixed order and gather them on
several threads, the consumer's included. It stops cleanly on ``close()``,
when the source reports ``closed``, or when a producer raises (the error is
re-raised in the consumer).

With a rate limiter on the buffer, a draw waits until the limiter allows it
(a learner blocks instead of failing); a draw made for a :class:`Prefetcher`
waits in short slices so that closing the iterator ends it, and closing the
buffer wakes it with StateError, which ends the iteration cleanly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from recollect.buffers.prefetcher import Prefetcher, check_prefetch, check_threads, prefetched
from recollect.buffers.source import Batches, SampleSource
from recollect.service.client.stream import check_batches_per_request, check_max_in_flight
from recollect.specs import FlatSpec

__all__ = [
    "Batches",
    "Prefetcher",
    "SampleSource",
    "as_source",
    "buffer_closed",
    "check_batches_per_request",
    "check_max_in_flight",
    "check_prefetch",
    "check_threads",
    "draw_concurrent",
    "flat_spec_of",
    "outer_shape",
    "prefetched",
    "sample_concurrent",
    "stream_options",
]


class StreamOptions(TypedDict):
    """The read-ahead keyword arguments of ``source.stream`` (see :func:`stream_options`)."""

    prefetch: int
    num_threads: int
    max_in_flight: int
    batches_per_request: int


def stream_options(
    prefetch: Any, num_threads: Any, max_in_flight: Any, batches_per_request: Any
) -> StreamOptions:
    """The checked read-ahead options an adapter passes to ``source.stream(...)``: ``prefetch``
    batches ready on ``num_threads`` threads (a local buffer), ``max_in_flight`` requests of
    ``batches_per_request`` batches each (a served table); each an int >= 1.

    Raises:
        InvalidArgumentError: an option that is not an int, or < 1 (named in the message).
    """
    return StreamOptions(
        prefetch=check_prefetch(prefetch),
        num_threads=check_threads(num_threads),
        max_in_flight=check_max_in_flight(max_in_flight),
        batches_per_request=check_batches_per_request(batches_per_request),
    )


def as_source(buffer: Any) -> Any:
    """The :class:`SampleSource` readers read ``buffer`` through: a
    :class:`~recollect.ReplayBuffer`'s ``reader``, else ``buffer`` itself (a
    :class:`~recollect.TransitionBuffer`, a served table's handle, a user's own source)."""
    reader = getattr(buffer, "reader", None)
    return reader if isinstance(reader, SampleSource) else buffer


def buffer_closed(buffer: Any) -> bool:
    """Whether ``buffer`` says it is closed (``buffer.closed``; False when it has no such flag)."""
    return bool(getattr(buffer, "closed", False))


def flat_spec_of(buffer: Any) -> FlatSpec:
    """The buffer's flattened spec (``flat_spec``, or built from ``data_spec``)."""
    flat = getattr(as_source(buffer), "flat_spec", None)
    return flat if isinstance(flat, FlatSpec) else FlatSpec(buffer.data_spec)


def outer_shape(sample_batch_size: int | None, num_steps: int | None) -> list[int]:
    """Leading dims of an adapter's elements: ``[batch]``, ``[num_steps]``, both or none."""
    return [d for d in (sample_batch_size, num_steps) if d is not None]


def draw_concurrent(
    source: SampleSource, batch_size: int, num_steps: int | None
) -> Callable[[], Any]:
    """Draws a batch now and returns ``finish()``, which gathers it and returns it.

    ``source.draw(batch_size, num_steps)``: ``draw_concurrent(buffer, b, n)()``
    equals ``buffer.sample(b, n)`` (same result distribution, shapes and
    errors); see :meth:`recollect.buffers.source.SampleSource.draw`.
    """
    return as_source(source).draw(batch_size, num_steps)


def sample_concurrent(source: SampleSource, batch_size: int, num_steps: int | None) -> Any:
    """``source.sample(batch_size, num_steps)`` with the numpy gather outside the buffer lock.

    See :func:`draw_concurrent`; several threads may call this at once.
    """
    return as_source(source).draw(batch_size, num_steps)()
