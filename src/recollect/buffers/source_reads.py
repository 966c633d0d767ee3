"""``stream`` of the local buffers' :class:`~recollect.buffers.source.SampleSource` (the
``ReplayBuffer``'s reader and the ``TransitionBuffer``): the prefetch threads a reader reads
through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from recollect.buffers.prefetcher import Prefetcher, prefetched

__all__ = ["stream_local"]


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
