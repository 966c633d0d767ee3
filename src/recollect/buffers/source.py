"""SampleSource: the one interface every reader (adapters, manager, streams) samples through.

A local :class:`~recollect.ReplayBuffer`'s ``reader`` (a
:class:`~recollect.buffers.sampling.BufferReader`; the adapters read a buffer through it,
:func:`recollect.adapters.prefetch.as_source`), a :class:`~recollect.TransitionBuffer` and
a served table's :class:`~recollect.service.TableHandle` all implement it, structurally: the
readers call these members and never ask which kind of source they hold. A
user's own class with these members works with every adapter too.

The one thread layer between a source and a reader is the source's
:meth:`SampleSource.stream`: a local buffer samples on prefetch threads
(:class:`~recollect.adapters.prefetch.Prefetcher`), a served table keeps sample
requests in flight on its :class:`~recollect.service.SampleStream`'s pool;
readers iterate the stream and never stack threads of their own over it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

__all__ = ["Batches", "SampleSource"]


@runtime_checkable
class Batches(Protocol):
    """An endless iterator of batches sampled in the background (what :meth:`SampleSource.stream`
    returns). ``next()`` raises the sampling errors (e.g. NotEnoughDataError) and
    ``StopIteration`` once the stream or its source is closed."""

    def __iter__(self) -> Iterator[Any]: ...

    def __next__(self) -> Any: ...

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        ...

    def close(self) -> None:
        """Stops the background work; the iteration then ends. Idempotent."""
        ...


@runtime_checkable
class SampleSource(Protocol):
    """Where readers' batches come from: a local buffer or a served table."""

    @property
    def remote(self) -> bool:
        """True when samples travel over a transport (a served table): readers then read only
        through :meth:`stream`, which keeps requests in flight, not on threads of their own."""
        ...

    @property
    def data_spec(self) -> Any:
        """The nest of :class:`~recollect.ArraySpec` describing one step."""
        ...

    @property
    def closed(self) -> bool:
        """Whether the source is closed: readers' iterations then end."""
        ...

    def time_steps(self, num_steps: int | None) -> int | None:
        """The time axis length of ``sample(batch_size, num_steps)`` leaves, or None (no axis).

        Returns ``num_steps``, or for None the source's fixed window length
        when it is > 1.

        Raises:
            InvalidArgumentError: ``num_steps`` can never be sampled here
                (e.g. longer than the buffer's ``max_length``).
        """
        ...

    def sample(self, batch_size: int, num_steps: int | None = None) -> Any:
        """``batch_size`` windows of ``num_steps`` steps (a :class:`~recollect.Sample`).

        Leaves are ``[batch_size, num_steps, *leaf_shape]`` (no time axis for
        None); ``ids`` int64 and ``probabilities`` float64 ``[batch_size]``.

        Raises:
            NotEnoughDataError: no valid window is stored.
        """
        ...

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], Any]:
        """Draws a batch now and returns ``finish()``, which returns it as :meth:`sample` would.

        Draws made one after another consume the source's randomness in that
        order; ``finish`` may run later and on another thread (a local buffer
        gathers there, outside its lock).
        """
        ...

    def stream(
        self,
        batch_size: int,
        num_steps: int | None,
        *,
        convert: Callable[[Any], Any] | None = None,
        prefetch: int = 2,
        num_threads: int = 1,
        max_in_flight: int = 2,
        batches_per_request: int = 1,
    ) -> Batches:
        """The background reader of this source: batches ``convert(sample)`` in draw order.

        Args:
            batch_size: windows per batch.
            num_steps: window length, or None.
            convert: applied to each sample on the background threads (e.g.
                to tensors); None yields the samples.
            prefetch: batches a local buffer keeps ready, >= 1.
            num_threads: a local buffer's producer threads, >= 1.
            max_in_flight: a served table's outstanding requests, >= 1.
            batches_per_request: batches each request to a served table asks for, >= 1.

        Raises:
            InvalidArgumentError: an argument < 1.
        """
        ...
