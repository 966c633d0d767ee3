"""The :class:`~recollect.buffers.source.SampleSource` members of the local buffers (mixins): how a
reader draws from a buffer in memory and the prefetch threads it reads through."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from recollect.buffers.prefetcher import Prefetcher, draw_waiting, prefetched

if TYPE_CHECKING:
    from recollect.buffers.sample import Sample
    from recollect.table import Draw, Table

__all__ = ["BufferSource", "LocalSource"]


def stream_local(
    self: Any,
    batch_size: int,
    num_steps: int | None,
    *,
    convert: Callable[[Any], Any] | None = None,
    prefetch: int = 2,
    num_threads: int = 1,
    max_in_flight: int = 2,
    batches_per_request: int = 1,
) -> Prefetcher:
    """``stream`` of a local sample source ``self`` (a buffer of this process, the method
    of both buffers): ``num_threads``
    prefetch threads keeping ``prefetch`` batches ``convert(sample)`` ready.

    ``max_in_flight`` and ``batches_per_request`` concern served tables and are
    ignored. The iteration ends once the buffer is closed.

    Raises:
        InvalidArgumentError: ``prefetch`` or ``num_threads`` < 1.
    """
    del max_in_flight, batches_per_request  # a local buffer sends no requests
    return prefetched(
        self,
        batch_size,
        num_steps,
        convert=convert,
        prefetch=prefetch,
        num_threads=num_threads,
    )


class LocalSource:
    """SampleSource members of a buffer in this process, built on its ``sample`` (a mixin).

    ``draw`` samples at once (``sample(batch_size)`` when ``num_steps`` is
    None, as a :class:`~recollect.TransitionBuffer` takes it); ``stream`` is a
    :class:`~recollect.adapters.prefetch.Prefetcher` over ``draw``.
    """

    remote = False

    @property
    def closed(self) -> bool:
        """Whether the buffer was closed (False: this buffer has no ``close``)."""
        return False

    def time_steps(self, num_steps: int | None) -> int | None:
        """``num_steps``: the time axis length of this buffer's samples (None: no axis)."""
        return num_steps

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], Any]:
        """Samples now; returns ``finish()``, which returns the sample."""
        buffer: Any = self  # the buffer's own ``sample``
        s = buffer.sample(batch_size) if num_steps is None else buffer.sample(batch_size, num_steps)
        return lambda: s

    stream = stream_local


class BufferSource(LocalSource):
    """SampleSource members of :class:`~recollect.ReplayBuffer` (a mixin): draws under the
    table lock, gathers outside it (numpy releases the GIL), so readers on several threads
    gather at once."""

    def time_steps(self, num_steps: int | None) -> int | None:
        """``num_steps``, or for None the fixed ``sequence_length`` when it is > 1.

        Raises:
            InvalidArgumentError: ``num_steps`` > ``max_length`` (or < 1).
        """
        buffer: Any = self  # a ReplayBuffer: its table and sequence_length
        buffer.table.resolve_window(num_steps)
        if num_steps is not None:
            return num_steps
        fixed = buffer.sequence_length
        return fixed if fixed is not None and fixed > 1 else None

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], Sample]:
        """Draws the windows now, under the table lock; ``finish()`` gathers them.

        ``draw(b, n)()`` equals ``sample(b, n)``: same result distribution,
        shapes and errors. Draws made one after another consume the rng in
        that order wherever ``finish`` then runs; ``finish`` gathers outside
        the lock and, when ``table.is_stale(draw)`` says a write overwrote a
        drawn step meanwhile, samples again with the lock held (no retry
        loop). On a prefetch thread a rate-limited draw waits in slices and
        ends with StateError when the prefetcher is closed.
        """
        buffer: Any = self  # a ReplayBuffer: its table, gather and sample
        table: Table = buffer.table
        drawn: Draw = draw_waiting(table, batch_size, num_steps)

        def finish() -> Sample:
            sample: Sample = buffer.gather(drawn)
            if table.is_stale(drawn):
                sample = buffer.sample(batch_size, num_steps)
            return sample

        return finish
