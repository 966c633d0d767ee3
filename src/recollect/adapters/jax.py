"""JAX adapter: batches as ``jax.Array`` nests, prefetched on a thread (jax imported lazily).

:func:`as_iterator` samples on a background thread (and on the caller's when
no batch is ready) and places each batch on the device (asynchronous
dispatch), so the next batch is already there when the training step asks
for it.

Dtypes: JAX narrows 64-bit leaves (int64 -> int32, float64 -> float32) unless
``jax_enable_x64`` is on; see :func:`as_iterator`.

Placement: ``jax.device_put`` spends about 15 us of Python per array (pytree,
sharding and dtype resolution), as much as the gather of a small batch. For
a single target device :class:`_Placer` resolves all of that once and calls
the transfer that ``jax.device_put`` ends in (``batched_device_put``, about
2 us per array), with the same dtype canonicalisation, commitment and
zero-copy aliasing. That entry point is internal to JAX, so it is probed
against ``jax.device_put`` when an iterator is built and every other case
(shardings over several devices, a JAX without it, a probe mismatch) uses
``jax.device_put`` itself.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import numpy as np

from recollect.adapters.prefetch import (
    Batches,
    as_source,
    stream_options,
)
from recollect.buffers.sample import BufferInfo, Sample
from recollect.extras import missing_extra

try:
    import jax
except ImportError as err:
    raise missing_extra(err, "recollect.jax") from None

__all__ = ["ReplayIterator", "as_iterator"]


_METADATA = ("ids", "probabilities", "weights")


def _direct_transfer() -> tuple[Any, Any] | None:
    """JAX's internal ``(batched_device_put, ShapedArray)``, or None when this JAX lacks them.

    The transfer is the C++ ``xla_client.batched_device_put`` that
    ``pxla.batched_device_put`` ends in for numpy inputs (skipping its Python
    wrapper saves 1-2 us per leaf), else that wrapper.
    """
    try:
        from jax._src.core import ShapedArray
        from jax._src.interpreters.pxla import batched_device_put
    except ImportError:
        return None
    try:
        from jax._src.lib import xla_client
    except ImportError:
        return batched_device_put, ShapedArray
    return getattr(xla_client, "batched_device_put", batched_device_put), ShapedArray


class _Placer:
    """Places numpy nests on one device like ``jax.device_put(nest, device, may_alias=True)``.

    For ``device`` None (JAX's default device, uncommitted), a ``jax.Device``
    or a single-device sharding (both committed) each leaf goes through JAX's
    internal ``batched_device_put`` (see :func:`_direct_transfer`) with an
    abstract value cached per shape and dtype; anything else, or a failed
    probe, uses ``jax.device_put``.
    """

    def __init__(self, device: Any) -> None:
        self.device = device
        self._avals: dict[tuple[tuple[int, ...], np.dtype], Any] = {}
        self._fast = None
        target = self._single_device(device)
        transfer = _direct_transfer()
        if target is None or transfer is None:
            return
        self._put_one, self._shaped_array = transfer
        self._target = target
        self._sharding = jax.sharding.SingleDeviceSharding(target)
        self._committed = device is not None
        probe = np.arange(6, dtype=np.int64).reshape(2, 3)
        try:
            fast, slow = self._place(probe), jax.device_put(probe, device, may_alias=True)
            same = (
                fast.dtype == slow.dtype
                and fast.shape == slow.shape
                and fast.sharding == slow.sharding
                and fast.committed == slow.committed
                and bool((np.asarray(fast) == np.asarray(slow)).all())
            )
        except Exception:  # an internal API that changed: use the public one
            same = False
        self._fast = self._place if same else None

    @staticmethod
    def _single_device(device: Any) -> Any:
        if device is None:
            return next(iter(jax.device_put(np.zeros((), np.int8)).devices()))
        if isinstance(device, jax.Device):
            return device
        if isinstance(device, jax.sharding.SingleDeviceSharding):
            return next(iter(device.device_set))
        return None

    def _place(self, x: np.ndarray) -> jax.Array:
        key = (x.shape, x.dtype)
        aval = self._avals.get(key)
        if aval is None:
            dtype = jax.dtypes.canonicalize_dtype(x.dtype)
            aval = self._avals[key] = self._shaped_array(x.shape, dtype)
        if aval.dtype != x.dtype:  # e.g. int64 -> int32 without jax_enable_x64
            x = x.astype(aval.dtype)
        return self._put_one(aval, self._sharding, [x], [self._target], self._committed)

    def __call__(self, tree: Any) -> Any:
        """``tree`` (a nest of numpy arrays) with every leaf a ``jax.Array`` on the device."""
        if self._fast is None:
            return jax.device_put(tree, self.device, may_alias=True)
        return jax.tree.map(self._fast_leaf, tree)

    def _fast_leaf(self, x: Any) -> Any:
        if isinstance(x, np.ndarray) and x.dtype != object:
            return self._place(x)
        return jax.device_put(x, self.device, may_alias=True)


def _convert(place: _Placer, s: Any) -> Any:
    """A sample with its data on the device: ``(data, BufferInfo)``."""
    if not isinstance(s, Sample):  # e.g. a TransitionSample: move its data fields
        moved = {
            f.name: place(getattr(s, f.name))
            for f in dataclasses.fields(s)
            if f.name not in _METADATA and getattr(s, f.name) is not None
        }
        return dataclasses.replace(s, **moved)
    # The gathered arrays are fresh and never touched again, so a CPU device may
    # alias them instead of copying.
    data = place(s.data)
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
        max_in_flight: int = 2,
        batches_per_request: int = 1,
    ) -> None:
        self.buffer = buffer
        self.batch_size = batch_size
        self.num_steps = num_steps
        self.device = device
        options = stream_options(prefetch, num_threads, max_in_flight, batches_per_request)
        self._prefetcher: Batches = as_source(buffer).stream(
            batch_size, num_steps, convert=functools.partial(_convert, _Placer(device)), **options
        )

    def __next__(self) -> tuple[Any, BufferInfo]:
        item: tuple[Any, BufferInfo] = next(self._prefetcher)
        return item

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._prefetcher.closed

    def close(self) -> None:
        """Stops the background threads; the iterator then ends. Idempotent."""
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
    max_in_flight: int = 2,
    batches_per_request: int = 1,
) -> ReplayIterator:
    """An endless iterator of ``(data, BufferInfo)`` with ``jax.Array`` data leaves.

    ``data`` is a nest like the spec, leaves ``[batch_size, num_steps, *leaf_shape]``
    (``[batch_size, *leaf_shape]`` for ``num_steps=None``) placed with
    ``jax.device_put`` on ``device`` (default: JAX's default device). Leaf
    dtypes follow the spec, except that JAX narrows 64-bit leaves unless x64
    is enabled: int64 -> int32, uint64 -> uint32, float64 -> float32 (JAX's
    own rule; int64 values outside the int32 range wrap around silently). To
    keep 64-bit leaves, enable x64 before JAX creates any array:
    ``jax.config.update("jax_enable_x64", True)`` or ``JAX_ENABLE_X64=1``;
    or store int32 actions and float32 values in the spec. ``BufferInfo.ids``
    (int64) and ``probabilities`` (float64) stay numpy arrays ``[batch_size]``
    so ids are never truncated. A :class:`~recollect.TransitionBuffer` yields its
    ``TransitionSample`` with ``jax.Array`` data fields instead.

    Iteration ends when :meth:`ReplayIterator.close` is called or the buffer is
    closed (``buffer.closed``); sampling errors such as
    :class:`~recollect.errors.NotEnoughDataError` are raised by ``next()``.

    A served table's handle (``client.table(name)`` of a
    :class:`~recollect.service.Client`) works as a buffer: up to
    ``max_in_flight`` sample requests stay outstanding, and batches are placed
    on the request threads (no prefetch thread over them); iteration ends when
    the client is closed.

    Args:
        buffer: a :class:`~recollect.buffers.source.SampleSource`: a
            :class:`~recollect.ReplayBuffer`, a
            :class:`~recollect.TransitionBuffer`, a
            :class:`~recollect.service.TableHandle` or a class of your own;
            batches come from its ``stream``.
        batch_size: windows per batch, >= 1.
        num_steps: window length, or None for single steps.
        prefetch: batches kept ready on the device, >= 1.
        device: a ``jax.Device`` or sharding; None uses the default device.
        num_threads: producer threads sampling and placing batches concurrently, >= 1;
            batches keep their draw order whatever their number (when they pay:
            :class:`~recollect.adapters.prefetch.Prefetcher`).
        max_in_flight, batches_per_request: a served table's sample requests kept
            outstanding and batches each asks for, >= 1 (what they trade:
            :class:`~recollect.service.SampleStream`); a local buffer ignores them.

    Raises:
        InvalidArgumentError: ``prefetch``, ``num_threads``, ``max_in_flight`` or
            ``batches_per_request`` < 1.

    Example:
        >>> with as_iterator(buf, batch_size=32, num_steps=2) as it:
        ...     data, info = next(it)
    """
    return ReplayIterator(
        buffer,
        batch_size,
        num_steps,
        prefetch,
        device,
        num_threads,
        max_in_flight,
        batches_per_request,
    )
