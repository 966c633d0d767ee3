"""The chunked sampler of :func:`recollect.tf_data.as_dataset` and its process-exit guard.

:func:`chunked_sample_fn` is the ``tf.numpy_function`` that draws a chunk of
elements per call (one when the buffer was written since the previous call,
doubling up to a cap while it is not); :func:`splitter` splits a chunk into
its elements and, given the writer's generation variable, drops what was
drawn before a write. :data:`in_flight` counts the sampling calls running
inside TensorFlow and, at ``atexit``, stops and drains them so that a
process whose parallel ``map`` iterator is destroyed at shutdown exits.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from recollect.buffers.sample import BufferInfo
from recollect.errors import StateError
from recollect.extras import missing_extra
from recollect.prefetch import buffer_closed, flat_spec_of, outer_shape, sample_concurrent

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_data") from None

__all__ = ["InFlight", "chunk_ok", "chunked_sample_fn", "in_flight", "no_read_ahead", "splitter"]


class InFlight:
    """Counts the sampling calls running inside TensorFlow; stops new ones once the process exits.

    At interpreter shutdown TensorFlow's parallel ``map`` iterators are
    destroyed while their runner threads may still be inside a
    ``tf.numpy_function`` call; such a thread cannot take the GIL back once
    finalization began (Python ends it) and the destructor waits for it
    forever. :meth:`quiesce` runs at ``atexit`` (before finalization): it makes
    every later call return at once as "closed" (the dataset ends), and waits
    until the running calls have returned, so none is left to hang on.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.exiting = False

    def __enter__(self) -> None:
        with self.lock:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.count -= 1

    def quiesce(self, timeout_s: float = 5.0, settle_s: float = 0.25) -> None:
        """Stops new sampling; waits until no call ran for ``settle_s`` (at most ``timeout_s``)."""
        self.exiting = True
        deadline = time.monotonic() + timeout_s
        idle_since = None
        while time.monotonic() < deadline:
            now = time.monotonic()
            if self.count:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= settle_s:
                return
            time.sleep(0.005)


#: The sampling calls of this process (see :class:`InFlight`).
in_flight = InFlight()
atexit.register(in_flight.quiesce)


def chunked_sample_fn(
    buffer: Any,
    sample_batch_size: int | None,
    num_steps: int | None,
    most: int,
    wrap_error: Callable[[Exception], Exception] | None,
) -> Callable[[Any], tuple[Any, BufferInfo, Any, Any]]:
    """``fn(generation) -> (items [k, ...], BufferInfo [k, ...], generation, ok)``, k <= ``most``.

    A call draws one element when the buffer was written since the previous
    call, and twice the previous call's count (up to ``most``) when it was
    not: a training loop that adds between its reads never gets elements
    drawn ahead of its writes, and one that only reads amortises the
    ``tf.numpy_function`` call over up to ``most`` elements. ``ok`` is False
    (and k = 0) once the buffer is closed or the process exits.
    """
    flat = flat_spec_of(buffer)
    outer = outer_shape(sample_batch_size, num_steps)
    batch = 1 if sample_batch_size is None else int(sample_batch_size)
    info_tail = [] if sample_batch_size is None else [batch]
    shapes: list[list[Any]] = [[None, *outer, *s] for s in flat.shapes] + [[None, *info_tail]] * 2
    dtypes = [tf.as_dtype(d) for d in flat.dtypes] + [tf.int64, tf.float64]
    table = getattr(buffer, "table", None)
    state: dict[str, Any] = {"generation": None, "size": 0}

    def written() -> Any:
        index = getattr(table, "index", None)
        return None if index is None else index.generation

    def sample_numpy(gen: Any) -> list[np.ndarray]:
        with in_flight:
            if buffer_closed(buffer) or in_flight.exiting:
                empty = [
                    np.zeros([0, *s[1:]], d.as_numpy_dtype)
                    for s, d in zip(shapes, dtypes, strict=True)
                ]
                return [*empty, gen, np.bool_(False)]
            now = written()
            same = now is not None and now == state["generation"]
            k = min(most, 2 * state["size"]) if same else 1
            state["generation"], state["size"] = now, k
            try:  # a rate limiter may block the draw; closing the buffer wakes it
                s = sample_concurrent(buffer, batch * k, num_steps)
            except StateError:
                if buffer_closed(buffer):
                    return sample_numpy(gen)
                raise
            except Exception as err:
                if wrap_error is None:
                    raise
                raise wrap_error(err) from err
            leaves = [*flat.treedef.flatten_up_to(s.data), s.ids, s.probabilities]
            out = [x.reshape([k, *shape[1:]]) for x, shape in zip(leaves, shapes, strict=True)]
            return [*out, gen, np.bool_(True)]

    def fn(gen: Any) -> tuple[Any, BufferInfo, Any, Any]:
        gen = tf.cast(gen, tf.int64)
        out = tf.numpy_function(
            sample_numpy, [gen], [*dtypes, tf.int64, tf.bool], stateful=True, name="sample"
        )
        for tensor, shape in zip(out, [*shapes, [], []], strict=True):
            tensor.set_shape(shape)
        return flat.unflatten(out[:-4]), BufferInfo(out[-4], out[-3]), out[-2], out[-1]

    return fn


def splitter(generation: Any) -> Callable[..., tf.data.Dataset]:
    """``flat_map`` function splitting a chunk into its elements (slices sharing its memory).

    With a ``generation`` variable, every element but the first is dropped
    once the variable differs from the chunk's (the buffer was written after
    the chunk was drawn); the first element is the one the pipeline's
    ``map``/``prefetch`` holds (drawn when it was asked for, or ahead as the
    user requested).
    """

    def split(items: Any, info: BufferInfo, gen: Any, ok: Any) -> tf.data.Dataset:
        elements = tf.data.Dataset.from_tensor_slices((items, info))
        if generation is None:
            return elements

        def fresh(position: Any, element: Any) -> Any:
            return tf.logical_or(position == 0, tf.equal(generation.read_value(), gen))

        return elements.enumerate().take_while(fresh).map(lambda position, element: element)

    return split


def no_read_ahead() -> tf.data.Options:
    """Options without tf.data's own read-ahead: ``inject_prefetch`` (a ``prefetch`` after
    a user's ``map``) and ``map_parallelization`` (a user's stateless ``map`` run in parallel).

    Both would draw elements ahead that nobody asked for; the options reach
    every dataset chained after this one. A user's own ``prefetch`` and
    ``num_parallel_calls`` still apply.
    """
    options = tf.data.Options()
    optimization = options.experimental_optimization
    for name in ("inject_prefetch", "map_parallelization"):
        if hasattr(optimization, name):
            setattr(optimization, name, False)
    return options


def chunk_ok(items: Any, info: BufferInfo, gen: Any, ok: Any) -> Any:
    """Whether a chunk was sampled (False once the buffer is closed or the process exits)."""
    return ok
