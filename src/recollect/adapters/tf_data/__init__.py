"""tf.data adapter: a replay buffer as a ``tf.data.Dataset`` (tensorflow imported lazily).

Elements are ``(items, BufferInfo(ids, probabilities))`` as TF-Agents' replay
buffers return them: ``items`` is a nest like the data spec with leaves
``[sample_batch_size, num_steps, *leaf_shape]`` (either axis dropped when its
argument is None), ``ids`` int64 and ``probabilities`` float64, both
``[sample_batch_size]``. The ``element_spec`` is static, taken from the data
spec.

Sampling runs in ``tf.numpy_function`` inside ``Dataset.map``, drawing a
chunk of elements per call to amortise the call's overhead (split with
``from_tensor_slices``, whose slices share the chunk's memory): one element
when what the buffer may return changed since the previous call (a write,
``clear``, load, ``delete`` or ``update_priorities``), twice the previous
count (up to ``MAX_CHUNK``) while it did not (the chunk sampler of this package).
While it did not, the next chunk is also drawn on a background thread as
TensorFlow consumes this one, and the next call takes it only if the buffer
still did not change since that draw began (else it drops it and draws
anew): read-ahead that cannot go stale, made only where a draw leaves the
table as it was (no rate limiter that counts samples, no
``max_times_sampled``); see the ``chunks`` module.
With ``num_parallel_calls`` several samples are drawn at once: windows are
drawn under the buffer lock and gathered outside it (numpy releases the GIL
while gathering), see :func:`recollect.adapters.prefetch.sample_concurrent`.

Freshness: the pipeline switches off tf.data's own read-ahead
(``inject_prefetch``, ``map_parallelization``) for every dataset chained
after it. Given the writer's ``generation`` variable (the TF-Agents
``TFUniformReplayBuffer`` passes its own), an element asked for after a write
returned is drawn from a table that holds it, except the elements that a
user's ``num_parallel_calls``/``prefetch`` holds already. Without one (a
plain :class:`~recollect.ReplayBuffer` written in numpy), a chunk drawn during
a read-only phase can serve the rest of its elements (fewer than ``MAX_CHUNK``)
after a write, ``clear``, load, ``delete`` or ``update_priorities``, never a
chunk drawn ahead of it; the eager path below checks the buffer itself and
never does.

Iterating the sampling dataset eagerly (``for items, info in dataset``)
takes a faster path that samples in Python and yields the same elements,
see the ``eager`` module; inside a ``tf.function``, in Keras and after
any transformation but ``prefetch`` the pipeline above runs.

The sampling dataset is endless; it ends cleanly when the buffer is closed
(``buffer.closed``), also when a rate limiter keeps a draw waiting. Sampling a
buffer without a valid window raises (with a rate limiter: waits); it never
yields zeros.

Errors: argument errors are raised by :func:`as_dataset` itself with their
recollect type. Errors raised while sampling cross TensorFlow's runtime,
which keeps only a status code and a message: they surface from the iterator
as ``tf.errors.UnknownError`` (``tf.errors.InvalidArgumentError`` for
``ValueError``/``TypeError`` subclasses) whose message contains
``"<RecollectClass>: <message>"``. :func:`unwrap_error` returns the recollect
error: the original one in eager iteration (the TF error's ``__cause__``),
rebuilt from the message inside a ``tf.function`` or Keras.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from recollect import errors
from recollect.adapters.prefetch import (
    SampleSource,
    as_source,
    buffer_closed,
    check_batches_per_request,
    check_max_in_flight,
    flat_spec_of,
    outer_shape,
    sample_concurrent,
)
from recollect.adapters.tf_data import chunks as _tf_chunks
from recollect.adapters.tf_data import single_pass as _tf_pass
from recollect.arguments import positive_int
from recollect.buffers.sample import BufferInfo
from recollect.errors import InvalidArgumentError, StateError
from recollect.extras import missing_extra

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_data") from None

try:  # the eager fast path builds on TensorFlow internals; without them the pipeline serves
    from recollect.adapters.tf_data import eager as _tf_eager
except ImportError:  # pragma: no cover - a TensorFlow that moved them
    _tf_eager = None  # type: ignore[assignment]

__all__ = ["as_dataset", "input_fn", "make_sample_fn", "map_element", "unwrap_error"]

_ERROR_IN_MESSAGE = re.compile(r"\b([A-Z]\w*Error): ([^\n]*)")


def unwrap_error(err: BaseException) -> BaseException:
    """The recollect error a ``tf.errors`` error wraps, else ``err`` itself.

    Eager iteration keeps the original as ``err.__cause__``; inside a
    ``tf.function`` only the message survives, and the error is rebuilt from
    its ``"<RecollectClass>: <message>"`` (first line of the message).

    Example:
        >>> try:
        ...     items, info = next(iterator)
        ... except tf.errors.OpError as err:
        ...     raise unwrap_error(err) from err   # e.g. NotEnoughDataError
    """
    cause = err.__cause__
    if isinstance(cause, errors.RecollectError):
        return cause
    if isinstance(err, tf.errors.OpError):
        for name, message in _ERROR_IN_MESSAGE.findall(err.message):
            cls = getattr(errors, name, None)
            if isinstance(cls, type) and issubclass(cls, errors.RecollectError):
                return cls(message)
    return err


def check_args(buffer: SampleSource | None, sample_batch_size: Any, num_steps: Any) -> None:
    """Validates ``as_dataset`` arguments (raises InvalidArgumentError), ``num_steps`` against
    a local source too (``buffer.time_steps``; not checked for None)."""
    for name, value in (("sample_batch_size", sample_batch_size), ("num_steps", num_steps)):
        if value is not None:
            positive_int(name, value, "or None")
    buffer = None if buffer is None else as_source(buffer)
    if buffer is not None and not buffer.remote:  # a served table checks when it samples
        buffer.time_steps(num_steps)  # raises for num_steps > max_length


#: Bytes of sampled data one ``tf.numpy_function`` call may produce in a chunk.
CHUNK_BYTES = 16 << 20
#: At most this many elements are sampled per ``tf.numpy_function`` call.
MAX_CHUNK = 64
#: The cap with a rate limiter: a chunk is one draw, which the limiter gates as a whole.
RATE_LIMITED_MAX_CHUNK = 16


def _chunk_size(buffer: Any, sample_batch_size: int | None, num_steps: int | None) -> int:
    """Elements per numpy call: amortises tf.numpy_function's ~100-200 us per call overhead."""
    element = flat_spec_of(buffer).nbytes * (sample_batch_size or 1) * (num_steps or 1)
    table = getattr(buffer, "table", None)
    limited = getattr(table, "rate_limiter", None) is not None
    most = RATE_LIMITED_MAX_CHUNK if limited else MAX_CHUNK
    return int(max(1, min(most, CHUNK_BYTES // max(element, 1))))


def make_sample_fn(
    buffer: Any,
    sample_batch_size: int | None,
    num_steps: int | None,
    stop_when_closed: bool,
    chunk: int | None = None,
    wrap_error: Callable[[Exception], Exception] | None = None,
) -> Callable[[Any], tuple[Any, BufferInfo, Any]]:
    """A TF function ``fn(unused) -> (items, BufferInfo, ok)`` that samples the buffer.

    Works eagerly, inside ``Dataset.map`` and inside ``tf.function``. Shapes
    are static. ``ok`` is a bool scalar: False only when ``stop_when_closed``
    and the buffer is closed (the other outputs are then zeros, to be dropped
    with ``take_while``). With ``chunk=k`` one call draws ``k`` elements at
    once (every output gets a leading ``[k]`` axis, ``ok`` is ``[k]``): split
    them with ``Dataset.unbatch``. ``wrap_error(err)`` gives the error to
    raise for an error of the sample (e.g. a ``ValueError`` subclass, which
    TensorFlow reports as ``tf.errors.InvalidArgumentError``).
    """
    buffer = as_source(buffer)
    flat = flat_spec_of(buffer)
    outer = outer_shape(sample_batch_size, num_steps)
    batch = 1 if sample_batch_size is None else int(sample_batch_size)
    lead = [] if chunk is None else [chunk]
    info_shape = [*lead] if sample_batch_size is None else [*lead, batch]
    shapes = [[*lead, *outer, *s] for s in flat.shapes] + [info_shape, info_shape, lead]
    dtypes = [tf.as_dtype(d) for d in flat.dtypes] + [tf.int64, tf.float64, tf.bool]
    draws = batch * (chunk or 1)

    def closed_output() -> list[np.ndarray]:
        return [np.zeros(s, d.as_numpy_dtype) for s, d in zip(shapes, dtypes, strict=True)]

    def sample_numpy(_: Any) -> list[np.ndarray]:
        with _tf_chunks.in_flight:
            if stop_when_closed and (buffer_closed(buffer) or _tf_chunks.in_flight.exiting):
                return closed_output()
            try:  # a rate limiter may block the draw; closing the buffer wakes it
                s = sample_concurrent(buffer, draws, num_steps)
            except StateError:
                if stop_when_closed and buffer_closed(buffer):
                    return closed_output()
                raise
            except Exception as err:
                if wrap_error is None:
                    raise
                raise wrap_error(err) from err
            leaves = [*flat.treedef.flatten_up_to(s.data), s.ids, s.probabilities]
            leaves = [x.reshape(shape) for x, shape in zip(leaves, shapes, strict=False)]
            return [*leaves, np.ones(lead, bool)]

    def fn(unused: Any) -> tuple[Any, BufferInfo, Any]:
        out = tf.numpy_function(sample_numpy, [unused], dtypes, stateful=True, name="sample")
        for tensor, shape in zip(out, shapes, strict=True):
            tensor.set_shape(shape)
        return flat.unflatten(out[:-3]), BufferInfo(out[-3], out[-2]), out[-1]

    return fn


def as_dataset(
    buffer: Any,
    sample_batch_size: int | None = None,
    num_steps: int | None = None,
    num_parallel_calls: int | None = None,
    single_deterministic_pass: bool = False,
    *,
    max_in_flight: int = 2,
    batches_per_request: int = 1,
    generation: Any = None,
    wrap_error: Callable[[Exception], Exception] | None = None,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of ``(items, BufferInfo(ids, probabilities))`` sampled from ``buffer``.

    A served table's handle (``client.table(name)`` of a
    :class:`~recollect.service.Client`) works as a buffer in sampling mode:
    each iterator keeps up to ``max_in_flight`` sample requests outstanding
    (a ``Dataset.from_generator`` over a
    :class:`~recollect.service.SampleStream`; one request per element, or per
    ``SERVED_ITEMS`` single windows when ``sample_batch_size`` is None) and
    ends when the client is closed.

    Args:
        buffer: a :class:`~recollect.buffers.source.SampleSource`: a
            :class:`~recollect.ReplayBuffer`, a served table's
            :class:`~recollect.service.TableHandle` (sampling mode only) or a
            class of your own (sampling mode only).
        sample_batch_size: windows per element; None gives single windows
            without a batch axis.
        num_steps: window length; None gives single steps without a time
            axis, or windows of the buffer's fixed ``sequence_length`` (> 1)
            with one, as :meth:`~recollect.ReplayBuffer.sample` does.
        num_parallel_calls: samples drawn concurrently by the tf.data
            pipeline (``tf.data.AUTOTUNE`` ok); None samples sequentially.
            Eager iteration of the returned dataset ignores it: it samples on
            one producer thread and on the caller's (module docstring).
        single_deterministic_pass: iterate every valid window stored when the
            iterator is created exactly once, ordered by start time then env
            row, instead of sampling forever. The last batch may be smaller,
            so the batch axis of the ``element_spec`` is None in this mode and
            ``probabilities`` is ``1 / number of windows``.
        max_in_flight, batches_per_request: a served table's sample requests kept
            outstanding and batches each asks for, >= 1 (what they trade:
            :class:`~recollect.service.SampleStream`); a local buffer ignores them.
        generation: an int64 scalar ``tf.Variable`` that the writer
            increments after every write (``add_batch``, ``clear``) of a
            local buffer, or None. With it, the elements left in a chunk
            drawn before the variable changed are dropped (see "Freshness"
            in the module docstring).
        wrap_error: maps an error raised while sampling to the error to
            raise instead (e.g. one TensorFlow reports as
            ``tf.errors.InvalidArgumentError``); None keeps it.

    A :class:`~recollect.TransitionBuffer` (once added to: its spec comes
    from the first ``add``) gives transition batches: ``items`` is the dict
    ``{"observation", "action", "reward", "next_observation", "terminated",
    "truncated"}`` named as its ``sample`` names them, leaves
    ``[sample_batch_size, ...]`` (``num_steps`` must be None): its
    ``data_spec`` describes one sampled transition.

    Returns:
        The dataset; its ``element_spec`` gives the exact shapes and dtypes.

    Raises:
        InvalidArgumentError: a non-positive size, ``num_steps`` > the buffer's
            ``max_length`` (not None, for a TransitionBuffer), or a deterministic
            pass over a buffer that is not a :class:`~recollect.ReplayBuffer`.
        NotEnoughDataError: a TransitionBuffer that was never added to.
        NotEnoughDataError: (while iterating, wrapped in a
            ``tf.errors.UnknownError``; :func:`unwrap_error` returns it) no
            valid window is stored, or, in a deterministic pass, the windows
            were overwritten or cleared before they were read.
    """
    buffer = as_source(buffer)
    check_args(buffer, sample_batch_size, num_steps)
    check_max_in_flight(max_in_flight)
    check_batches_per_request(batches_per_request)
    num_steps = buffer.time_steps(num_steps)  # sampled alike; gives the static shape
    if single_deterministic_pass:
        return _tf_pass.single_pass_dataset(
            buffer, sample_batch_size, num_steps, num_parallel_calls
        )
    if buffer.remote:
        return _served_dataset(
            buffer, sample_batch_size, num_steps, max_in_flight, batches_per_request
        )
    most = _chunk_size(buffer, sample_batch_size, num_steps)
    sample = _tf_chunks.chunked_sample_fn(buffer, sample_batch_size, num_steps, most, wrap_error)
    if generation is None:
        dataset = tf.data.Dataset.counter().map(sample, num_parallel_calls=num_parallel_calls)
    else:
        dataset = tf.data.Dataset.counter().map(
            lambda _: sample(generation.read_value()), num_parallel_calls=num_parallel_calls
        )
    # The end check and the drop of ``ok`` run once per chunk; only the split runs per element.
    dataset = dataset.take_while(_tf_chunks.chunk_ok).flat_map(_tf_chunks.splitter(generation))
    dataset = dataset.with_options(_tf_chunks.no_read_ahead())
    if _tf_eager is None:
        return dataset
    return _tf_eager.SampledDataset(
        dataset, buffer, sample_batch_size, num_steps, wrap_error=wrap_error
    )


#: Single windows fetched per request when a served table's dataset has no batch axis.
SERVED_ITEMS = 64


def _served_dataset(
    table: SampleSource,
    sample_batch_size: int | None,
    num_steps: int | None,
    max_in_flight: int,
    batches_per_request: int,
) -> tf.data.Dataset:
    """Batches of a served table through its ``stream`` (a SampleStream) per iterator: the
    stream's request threads are the one thread layer (see :func:`as_dataset`)."""
    flat = flat_spec_of(table)
    outer = outer_shape(sample_batch_size or SERVED_ITEMS, num_steps)
    batch = outer[:1]
    signature = (
        flat.unflatten(
            [
                tf.TensorSpec([*outer, *shape], tf.as_dtype(dtype))
                for shape, dtype in zip(flat.shapes, flat.dtypes, strict=True)
            ]
        ),
        BufferInfo(tf.TensorSpec(batch, tf.int64), tf.TensorSpec(batch, tf.float64)),
    )

    def batches() -> Any:
        stream = table.stream(
            outer[0],
            num_steps,
            max_in_flight=max_in_flight,
            batches_per_request=batches_per_request,
        )
        try:
            while not table.closed:
                try:
                    sample = next(stream)
                except StopIteration:
                    return
                except StateError:
                    if table.closed:  # the client was closed: the dataset ends
                        return
                    raise
                yield sample.data, BufferInfo(sample.ids, sample.probabilities)
        finally:
            stream.close()

    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    return dataset.unbatch() if sample_batch_size is None else dataset


def map_element(dataset: tf.data.Dataset, fn: Callable[..., Any]) -> tf.data.Dataset:
    """``dataset.map(fn)``, keeping the eager fast path of an :func:`as_dataset` result."""
    if _tf_eager is not None and isinstance(dataset, _tf_eager.SampledDataset):
        return dataset.map_element(fn)
    return dataset.map(fn)


def input_fn(
    buffer: Any, batch_size: int, num_steps: int | None = None
) -> Callable[..., tf.data.Dataset]:
    """An input function that feeds a trainer from ``buffer`` (external buffer, decoupled trainer).

    The returned ``fn(input_context=None)`` builds a fresh prefetched,
    parallel-sampling :func:`as_dataset`; with a ``tf.distribute.InputContext``
    (``strategy.distribute_datasets_from_function(fn)``) each replica gets its
    share of ``batch_size``.

    Raises:
        InvalidArgumentError: ``batch_size`` < 1 or a bad ``num_steps``.
    """
    if batch_size is None:
        raise InvalidArgumentError("`batch_size` must be an int >= 1; got None.")
    check_args(buffer, batch_size, num_steps)

    def fn(input_context: Any = None) -> tf.data.Dataset:
        per_replica = batch_size
        if input_context is not None:
            per_replica = input_context.get_per_replica_batch_size(batch_size)
        dataset = as_dataset(buffer, per_replica, num_steps, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return fn
