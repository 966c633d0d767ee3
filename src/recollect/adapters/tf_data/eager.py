"""The eager fast path of :func:`recollect.tf_data.as_dataset` (builds on TensorFlow internals).

Iterating a sampling dataset eagerly (``for items, info in dataset``)
takes a faster path: the iterator samples in Python, with the adapters'
:class:`~recollect.adapters.prefetch.Prefetcher` (a producer thread, and the consumer
itself when the next batch is not ready) for elements of at least
``INLINE_BELOW_BYTES`` and inline in ``next()`` for smaller ones (whose
Python-bound sampling holds the GIL, so a thread only adds hand-offs), and
wraps the gathered arrays as tensors without copying (DLPack; the gather
output is 64-byte aligned). TF's
own eager iterator spends about 15 us of Python per tensor repacking each
element, and a ``tf.numpy_function`` call inside tf.data about 100 us (2-core
machine), together more than the sample itself. Inside a ``tf.function``, in
Keras and after any further transformation except ``prefetch`` (``map``,
``batch``, ...) the tf.data pipeline of :mod:`recollect.tf_data` runs as
usual; both paths draw from the same buffer and rng and yield the same
structure, shapes and dtypes.

:class:`SampledDataset` wraps the dataset's pipeline unchanged (same variant
tensor, same ``element_spec``) and only overrides ``__iter__`` in eager mode;
:class:`EagerSampleIterator` is a ``tf.data`` ``OwnedIterator`` whose eager
``next()`` is served in Python while graph-mode calls use the inherited
iterator resource. Both subclass private TensorFlow classes
(``tensorflow.python.data.ops``): :mod:`recollect.tf_data` falls back to the
plain pipeline when they cannot be imported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops, iterator_ops
from tensorflow.python.eager import context

from recollect.adapters.prefetch import (
    Prefetcher,
    buffer_closed,
    draw_concurrent,
    flat_spec_of,
    outer_shape,
)
from recollect.buffers.sample import BufferInfo
from recollect.errors import StateError
from recollect.specs import FlatSpec

__all__ = [
    "EAGER_PREFETCH",
    "INLINE_BELOW_BYTES",
    "EagerSampleIterator",
    "SampledDataset",
    "as_tensor",
]


#: Batches an eager iterator keeps ready (its producer thread draws this far ahead).
EAGER_PREFETCH = 2
#: Reads in a row without a write after which an inline eager iterator prefetches again.
FRESH_READS = 8
#: Elements smaller than this (bytes) are sampled inline by an eager ``next()``, not prefetched.
INLINE_BELOW_BYTES = 1 << 18
#: Arrays smaller than this are copied into aligned memory to be wrapped; larger
#: unaligned ones are converted by ``tf.convert_to_tensor`` (a copy either way).
_SMALL_BYTES = 1 << 16
_ALIGN = 64


def _address(x: np.ndarray) -> int:
    """The address of ``x``'s first byte (``__array_interface__``: half the cost of ``ctypes``)."""
    return x.__array_interface__["data"][0]


def as_tensor(x: np.ndarray) -> tf.Tensor:
    """``x`` as an eager CPU tensor, sharing its memory when it is aligned and contiguous.

    An aligned contiguous array (the gather's output) is wrapped through DLPack
    (about 1 us); a small unaligned one is first copied into aligned memory;
    anything else goes through ``tf.convert_to_tensor`` (a copy).
    """
    if not (x.size and x.flags.c_contiguous and x.dtype.kind in "biuf"):
        return tf.convert_to_tensor(x)
    if _address(x) % _ALIGN:
        if x.nbytes > _SMALL_BYTES:
            return tf.convert_to_tensor(x)
        raw = np.empty(x.nbytes + _ALIGN, np.uint8)
        start = -_address(raw) % _ALIGN
        aligned = raw[start : start + x.nbytes].view(x.dtype).reshape(x.shape)
        aligned[...] = x
        x = aligned
    return tf.experimental.dlpack.from_dlpack(x.__dlpack__())  # TF kernels need aligned buffers


def _eager_element(
    gather: Callable[[], Any],
    flat: FlatSpec,
    shapes: list[list[int]],
    fn: Callable[..., Any] | None,
) -> Any:
    """One dataset element from a drawn sample: ``(items, BufferInfo)`` of eager tensors."""
    s = gather()
    leaves = [*flat.treedef.flatten_up_to(s.data), s.ids, s.probabilities]
    tensors = [as_tensor(x.reshape(shape)) for x, shape in zip(leaves, shapes, strict=True)]
    element = flat.unflatten(tensors[:-2]), BufferInfo(tensors[-2], tensors[-1])
    return element if fn is None else _apply(fn, element)


def _apply(fn: Callable[..., Any], element: Any) -> Any:
    """``fn`` called as ``Dataset.map`` calls it: a plain tuple element is unpacked."""
    return fn(*element) if type(element) is tuple else fn(element)


class EagerSampleIterator(iterator_ops.OwnedIterator):
    """A tf.data iterator whose eager ``next()`` samples in Python (see the module docstring).

    Elements of at least ``INLINE_BELOW_BYTES`` are prefetched by a
    :class:`~recollect.adapters.prefetch.Prefetcher` (its gathers release the GIL and
    overlap); smaller ones are sampled inline by ``next()``: their sampling is
    Python bound and holds the GIL, so a producer thread only adds hand-offs.
    So are all elements of a table whose draws change it (``max_times_sampled``,
    a rate limiter that counts samples: ``table.read_only_draws`` is False), as
    the graph path never draws ahead on one: a prefetched batch that a change
    made stale is dropped, and dropping such a draw would lose its windows.
    Both give the sequence of ``buffer.sample`` calls and end, or raise, alike.
    Graph-mode calls (the iterator passed into a ``tf.function``) use the
    dataset's own pipeline through the inherited resource.
    """

    def __init__(self, dataset: SampledDataset) -> None:
        super().__init__(dataset)
        buffer, sample_batch_size, num_steps, element_fn, wrap_error = dataset.sampling
        flat = flat_spec_of(buffer)
        outer = outer_shape(sample_batch_size, num_steps)
        info = [] if sample_batch_size is None else [sample_batch_size]
        shapes = [[*outer, *shape] for shape in flat.shapes] + [info, info]
        finish = functools.partial(_eager_element, flat=flat, shapes=shapes, fn=element_fn)
        batch = 1 if sample_batch_size is None else sample_batch_size

        table: Any = getattr(buffer, "table", None)
        # moves with every change of what a draw may return (writes, deletes, priorities, ...)
        known = getattr(table, "index", None) is not None
        self._written = (lambda: table.version) if known else (lambda: None)

        def draw() -> Callable[[], Any]:
            version = self._written()  # read before the draw: a later change makes it stale
            gathered = functools.partial(finish, draw_concurrent(buffer, batch, num_steps))
            return lambda: (version, gathered())

        self._draw = draw
        self._wrap_error = wrap_error
        self._should_stop = functools.partial(buffer_closed, buffer)
        # a draw that counts (max_times_sampled's removals, a limiter that counts samples)
        # is never made ahead: a prefetched batch dropped as stale would lose its windows
        self._large = flat.nbytes * batch * (num_steps or 1) >= INLINE_BELOW_BYTES and bool(
            getattr(table, "read_only_draws", True)
        )
        self._inline = not self._large
        self._quiet_reads = 0  # reads in a row that found no change since the previous one
        self._last_seen: Any = None
        self._ended = False
        self._prefetcher: Prefetcher | None = None

    def _next_internal(self) -> Any:
        if not context.executing_eagerly():
            return super()._next_internal()
        try:
            return self._next_inline() if self._inline else self._next_prefetched()
        except StopIteration:
            raise tf.errors.OutOfRangeError(None, None, "End of sequence") from None
        except tf.errors.OpError:
            raise
        except Exception as err:  # as the tf.data pipeline reports it
            if self._wrap_error is not None:
                wrapped = self._wrap_error(err)
                if isinstance(wrapped, tf.errors.OpError):
                    raise wrapped from err
            raise tf.errors.UnknownError(None, None, f"{type(err).__name__}: {err}") from err

    def _next_prefetched(self) -> Any:
        """A prefetched element, unless what the buffer may return changed since it was
        drawn (a write, clear, load, delete or priority update: ``table.version``).

        A stale element (and everything prefetched with it) is dropped and
        the iterator samples inline until ``FRESH_READS`` reads in a row found
        no change (a loop that adds or updates priorities between reads gains
        nothing from drawing ahead).
        """
        if self._prefetcher is None:  # started on first use: graph-mode use needs no thread
            self._prefetcher = Prefetcher(self._draw, EAGER_PREFETCH, self._should_stop)
        version, element = next(self._prefetcher)
        if version == self._written():
            return element
        self._prefetcher.close(timeout_s=0.0)
        self._prefetcher = None
        self._inline, self._quiet_reads = True, 0
        return self._next_inline()

    def _next_inline(self) -> Any:
        """One element sampled now; ends and raises as a :class:`Prefetcher` does."""
        if self._ended or self._should_stop():
            self._ended = True
            raise StopIteration
        if self._large:  # back to prefetching after FRESH_READS reads without a change
            written = self._written()
            self._quiet_reads = self._quiet_reads + 1 if written == self._last_seen else 0
            self._last_seen = written
            self._inline = self._quiet_reads < FRESH_READS
        try:
            return self._draw()()[1]
        except StateError:  # a close woke a draw blocked on the rate limiter
            self._ended = True
            if self._should_stop():
                raise StopIteration from None
            raise
        except BaseException:
            self._ended = True  # an error ends the iteration, as with the Prefetcher
            raise

    def __del__(self) -> None:
        prefetcher = getattr(self, "_prefetcher", None)
        if prefetcher is not None:
            prefetcher.close(timeout_s=0.0)
        parent = getattr(super(), "__del__", None)
        if parent is not None:
            parent()


class SampledDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """The sampling pipeline, unchanged, with a faster eager iterator (module docstring)."""

    def __init__(
        self,
        dataset: tf.data.Dataset,
        buffer: Any,
        sample_batch_size: int | None,
        num_steps: int | None,
        element_fn: Callable[..., Any] | None = None,
        wrap_error: Callable[[Exception], Exception] | None = None,
    ) -> None:
        self._sampling = (buffer, sample_batch_size, num_steps, element_fn, wrap_error)
        super().__init__(dataset, dataset._variant_tensor)

    @property
    def sampling(
        self,
    ) -> tuple[Any, int | None, int | None, Callable[..., Any] | None, Callable[..., Any] | None]:
        """What its eager iterator samples: ``(buffer, sample_batch_size, num_steps,
        element_fn, wrap_error)`` as given to the constructor."""
        return self._sampling

    def map_element(self, fn: Callable[..., Any]) -> SampledDataset:
        """``self.map(fn)`` whose eager iterator applies ``fn`` eagerly (keeps the fast path)."""
        buffer, batch, steps, inner, wrap = self._sampling
        composed = fn if inner is None else (lambda *e: _apply(fn, _apply(inner, e)))
        mapped = tf.data.Dataset.map(self, fn)
        return SampledDataset(mapped, buffer, batch, steps, composed, wrap_error=wrap)

    def with_options(self, options: Any, name: str | None = None) -> tf.data.Dataset:
        """``Dataset.with_options`` that keeps the fast eager iterator."""
        return SampledDataset(super().with_options(options, name=name), *self._sampling)

    def __iter__(self) -> iterator_ops.OwnedIterator:
        if context.executing_eagerly():
            return EagerSampleIterator(self)
        return super().__iter__()

    def prefetch(self, buffer_size: Any, name: str | None = None) -> tf.data.Dataset:
        """``Dataset.prefetch`` that keeps the fast eager iterator (which prefetches itself)."""
        prefetched = super().prefetch(buffer_size, name=name)
        return SampledDataset(prefetched, *self._sampling)
