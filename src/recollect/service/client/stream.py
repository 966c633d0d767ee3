"""SampleStream: an endless iterator of a served table's samples, requests kept in flight.

It is the served table's one thread layer (what ``TableHandle.stream`` returns,
see :class:`~recollect.buffers.source.SampleSource`): readers iterate it directly.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from recollect.arguments import positive_int
from recollect.buffers import Sample
from recollect.errors import InvalidArgumentError

__all__ = ["BatchedTable", "SampleStream", "check_batches_per_request", "check_max_in_flight"]


class BatchedTable(Protocol):
    """What a :class:`SampleStream` reads: a served table that samples several batches per
    request (a :class:`~recollect.service.TableHandle`)."""

    @property
    def closed(self) -> bool:
        """Whether the table's client is closed."""
        ...

    def sample_batches(
        self,
        batch_size: int,
        num_batches: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> list[Sample]:
        """Up to ``num_batches`` batches of ``batch_size`` windows, in one request."""
        ...


def check_max_in_flight(max_in_flight: Any) -> int:
    """Validates a number of outstanding sample requests (int >= 1).

    Raises:
        InvalidArgumentError: not an int, or < 1.
    """
    return positive_int("max_in_flight", max_in_flight, "sample requests outstanding")


def check_batches_per_request(batches_per_request: Any) -> int:
    """Validates a number of batches per sample request (int >= 1).

    Raises:
        InvalidArgumentError: not an int, or < 1.
    """
    return positive_int(
        "batches_per_request", batches_per_request, "batches each sample request asks for"
    )


def _fetch(table: BatchedTable, request: tuple, convert: Callable[[Any], Any] | None) -> list:
    """One request (on a pool thread): its batches, converted."""
    batch_size, batches, num_steps, timeout, options = request
    got = table.sample_batches(batch_size, batches, num_steps, timeout, **options)
    return got if convert is None else [convert(b) for b in got]


class SampleStream(Iterator[Any]):
    """Samples ``batch_size`` windows of a served table per ``next()``, keeping up to
    ``max_in_flight`` sample requests outstanding (Reverb's
    ``max_in_flight_samples_per_worker``), so the learner overlaps the network
    round trip and the shard's work with its own step.

    Each request asks for ``batches_per_request`` batches
    (:meth:`Client.sample_batches <recollect.service.Client.sample_batches>`),
    which spreads the transport's fixed cost per request (a Ray round trip,
    about 1 ms) over them; priority updates the client held back go along.
    Batches are drawn at most ``max_in_flight * batches_per_request`` batches
    ahead of the one ``next()`` returns, so a prioritized table's updates reach
    draws that much later.

    Requests run on ``max_in_flight`` threads; batches come back in request
    order; ``convert(sample)`` (when given) runs on those threads too, so a
    reader gets its batches converted (e.g. to tensors) without a thread
    layer of its own. An error of a request (e.g. ``RateLimiterTimeout``) is raised by the
    ``next()`` that would have returned its first batch. Iteration ends
    (``StopIteration``) after :meth:`close` and once the table's client is
    closed, also while a request waits on the rate limiter (closing the
    client ends it, see :meth:`Client.close <recollect.service.Client.close>`).

    Args:
        table: a :class:`~recollect.service.TableHandle` (``client.table(name)``).
        batch_size: windows per batch.
        num_steps: window length (as ``ReplayBuffer.sample``).
        max_in_flight: outstanding requests, >= 1.
        batches_per_request: batches each request asks for, >= 1.
        timeout: rate-limiter wait of each request (None: forever).
        convert: applied to each batch on the request threads; None yields
            the :class:`~recollect.Sample` batches.
        **options: sampler options (``importance_sampling_exponent``).

    Raises:
        InvalidArgumentError: not a served table (no ``sample_batches``), or ``max_in_flight`` or
            ``batches_per_request`` < 1.
    """

    def __init__(
        self,
        table: BatchedTable,
        batch_size: int,
        num_steps: int | None = None,
        *,
        max_in_flight: int = 2,
        batches_per_request: int = 1,
        timeout: float | None = None,
        convert: Callable[[Any], Any] | None = None,
        **options: Any,
    ) -> None:
        if not callable(getattr(table, "sample_batches", None)):
            raise InvalidArgumentError(
                f"SampleStream reads a served table: pass client.table(name); got "
                f"{type(table).__name__}."
            )
        self.table = table
        self.max_in_flight = check_max_in_flight(max_in_flight)
        self.batches_per_request = check_batches_per_request(batches_per_request)
        self._request = (batch_size, batches_per_request, num_steps, timeout, options)
        self._convert = convert
        self._ready: collections.deque[Any] = collections.deque()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_in_flight, thread_name_prefix="recollect-sample"
        )
        self._pending: collections.deque = collections.deque()
        self._closed = False

    def _submit(self) -> None:
        # the request holds no reference to the stream: an abandoned stream is collected
        self._pending.append(self._pool.submit(_fetch, self.table, self._request, self._convert))

    def __iter__(self) -> SampleStream:
        return self

    def __next__(self) -> Any:
        if self._closed or self.table.closed:
            self.close()
            raise StopIteration
        if self._ready:
            return self._ready.popleft()
        while len(self._pending) < self.max_in_flight:
            self._submit()
        future = self._pending.popleft()
        try:
            batches = future.result()
        except Exception:
            if self._closed or self.table.closed:  # what closing did to a request in flight
                self.close()
                raise StopIteration from None
            raise
        if not self._closed:
            self._submit()
        self._ready.extend(batches[1:])
        return batches[0]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the iteration ended)."""
        return self._closed

    def close(self) -> None:
        """Stops issuing requests; outstanding ones finish in the background (idempotent)."""
        if not self._closed:
            self._closed = True
            for future in self._pending:
                future.cancel()
            self._pending.clear()
            self._ready.clear()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SampleStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if hasattr(self, "_pool"):  # not for an instance whose __init__ raised
            self.close()
