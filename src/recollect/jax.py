"""JAX adapter: batches as ``jax.Array`` nests, prefetched on a thread (jax imported lazily).

:func:`as_iterator` samples on a background thread and moves each batch with
``jax.device_put`` (asynchronous dispatch), so the next batch is already on
the device when the training step asks for it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import jax

from recollect._adapter import (
    Prefetcher,
    buffer_closed,
    check_prefetch,
    check_threads,
    sample_concurrent,
)
from recollect.buffers.sample import BufferInfo, Sample

__all__ = ["ReplayIterator", "as_iterator"]


_METADATA = ("ids", "probabilities", "weights")


def _produce(
    buffer: Any, batch_size: int, num_steps: int | None, device: Any
) -> tuple[Any, BufferInfo]:
    s = sample_concurrent(buffer, batch_size, num_steps)
    if not isinstance(s, Sample):  # e.g. a TransitionSample: move its data fields
        moved = {
            f.name: jax.device_put(getattr(s, f.name), device, may_alias=True)
            for f in dataclasses.fields(s)
            if f.name not in _METADATA and getattr(s, f.name) is not None
        }
        return dataclasses.replace(s, **moved)
    # One transfer call for the whole nest; the gathered arrays are fresh and never
    # touched again, so a CPU device may alias them instead of copying.
    data = jax.device_put(s.data, device, may_alias=True)
    # ids/probabilities stay numpy: jax defaults to 32-bit and would truncate int64 ids.
    return data, BufferInfo(s.ids, s.probabilities)


class ReplayIterator(Iterator[tuple[Any, BufferInfo]]):
    """Iterator returned by :func:`as_iterator`; close it with :meth:`close` (or ``with``)."""

    def __init__(
        self,
        buffer: Any,
        batch_size: int,
        num_steps: int | None,
        prefetch: int,
        device: Any,
        num_threads: int = 1,
    ) -> None:
        self.buffer = buffer
        self.batch_size = batch_size
        self.num_steps = num_steps
        self.device = device
        self._prefetcher = Prefetcher(
            functools.partial(_produce, buffer, batch_size, num_steps, device),
            check_prefetch(prefetch),
            functools.partial(buffer_closed, buffer),
            check_threads(num_threads),
        )

    def __next__(self) -> tuple[Any, BufferInfo]:
        return next(self._prefetcher)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._prefetcher.closed

    def close(self) -> None:
        """Stops the prefetch thread; the iterator then ends. Idempotent."""
        self._prefetcher.close()

    def __enter__(self) -> ReplayIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def as_iterator(
    buffer: Any,
    batch_size: int,
    num_steps: int | None = None,
    prefetch: int = 2,
    *,
    device: Any = None,
    num_threads: int = 1,
) -> ReplayIterator:
    """An endless iterator of ``(data, BufferInfo)`` with ``jax.Array`` data leaves.

    ``data`` is a nest like the spec, leaves ``[batch_size, num_steps, *leaf_shape]``
    (``[batch_size, *leaf_shape]`` for ``num_steps=None``) placed with
    ``jax.device_put`` on ``device`` (default: JAX's default device). Leaf
    dtypes follow the spec, except that 64-bit leaves become 32-bit unless
    ``jax_enable_x64`` is on (JAX's own rule). ``BufferInfo.ids`` (int64) and
    ``probabilities`` (float64) stay numpy arrays ``[batch_size]`` so ids are
    never truncated. A :class:`~recollect.TransitionBuffer` yields its
    ``TransitionSample`` with ``jax.Array`` data fields instead.

    Iteration ends when :meth:`ReplayIterator.close` is called or the buffer is
    closed (``buffer.closed``); sampling errors such as
    :class:`~recollect.errors.NotEnoughDataError` are raised by ``next()``.

    Args:
        buffer: a :class:`~recollect.ReplayBuffer` (or anything with ``sample``).
        batch_size: windows per batch, >= 1.
        num_steps: window length, or None for single steps.
        prefetch: batches kept ready on the device, >= 1.
        device: a ``jax.Device`` or sharding; None uses the default device.
        num_threads: producer threads sampling and placing batches
            concurrently, >= 1; with more than one, batches arrive in a
            nondeterministic order (each still drawn from the seeded rng).

    Raises:
        InvalidArgumentError: ``prefetch`` or ``num_threads`` < 1.

    Example:
        >>> with as_iterator(buf, batch_size=32, num_steps=2) as it:
        ...     data, info = next(it)
    """
    return ReplayIterator(buffer, batch_size, num_steps, prefetch, device, num_threads)
