"""Reverb's ``TrajectoryDataset`` on :mod:`recollect.reverb` (needs TensorFlow).

``reverb.TrajectoryDataset(server_address, table, dtypes, shapes,
max_in_flight_samples_per_worker, ...)`` and ``.from_table_signature(...)`` keep
Reverb 0.14's arguments, build-time ``ValueError`` messages and ``element_spec``:
elements are ``ReplaySample(info, data)`` with scalar ``info`` fields (key uint64,
probability float64, table_size int64, priority float64, times_sampled int32) and
``data`` shaped like ``dtypes``/``shapes`` (lists become tuples, as Reverb's).

Sampling goes through the Python :class:`~recollect.reverb.Client`: one call
draws up to ``max_in_flight_samples_per_worker`` items at once (numpy arrays
``[k, ...]`` per column, split by ``unbatch``), never more than ``max_samples``
minus what was drawn already. Each iterator draws on its own (per-iterator
``max_samples`` budget). A sample drawn in a call is served as is: like
Reverb's in-flight samples, up to ``max_in_flight_samples_per_worker`` samples
drawn before an item was deleted can still be served afterwards (none drawn
after it).

Ending: a ``rate_limiter_timeout_ms >= 0`` that passes while the table's rate
limiter blocks ends the dataset (``OutOfRangeError`` / ``StopIteration``), as does
``max_samples``. Run-time errors (a missing table, data not matching ``dtypes``/
``shapes``) surface from the iterator as ``tf.errors.InvalidArgumentError``
with Reverb's message text (Reverb: when the iterator is made; here: at its
first ``next``).

``TimestepDataset`` (deprecated in Reverb) serves the same draws one timestep per
element; ``PatternDataset`` is in :mod:`recollect.reverb.pattern_dataset`.

Differences: ``num_workers_per_iterator`` > 1 runs that many Python samplers on threads
(default -1: one, as sampling is vectorized); ``max_samples_per_stream`` is
accepted and checked, nothing else (there are no streams).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from recollect.arguments import reverb_positive_int
from recollect.errors import InvalidArgumentError
from recollect.reverb import signature as _signature
from recollect.reverb.client import Client
from recollect.reverb.errors import DeadlineExceededError
from recollect.reverb.replay_sample import ReplaySample, SampleInfo
from recollect.reverb.wrapped_dataset import WrappedDataset

__all__ = ["TimestepDataset", "TrajectoryDataset", "check_dataset_arguments", "sample_chunks"]

_INFO_DTYPES = (tf.uint64, tf.float64, tf.int64, tf.float64, tf.int32)


def check_dataset_arguments(
    max_in_flight_samples_per_worker: int,
    num_workers_per_iterator: int,
    max_samples_per_stream: int,
    rate_limiter_timeout_ms: int,
    max_samples: int,
) -> None:
    """Reverb's build-time checks of the dataset arguments.

    Raises:
        InvalidArgumentError (a ValueError): with Reverb's message for the first bad one.
    """
    reverb_positive_int("max_in_flight_samples_per_worker", max_in_flight_samples_per_worker)
    reverb_positive_int("num_workers_per_iterator", num_workers_per_iterator, or_minus_one=True)
    reverb_positive_int("max_samples_per_stream", max_samples_per_stream, or_minus_one=True)
    if rate_limiter_timeout_ms < -1:
        raise InvalidArgumentError(
            f"rate_limiter_timeout_ms ({rate_limiter_timeout_ms}) must be an integer >= -1"
        )
    reverb_positive_int("max_samples", max_samples, or_minus_one=True)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return _text(value.item())
    return str(value)


def _check_columns(
    table: str, dtypes: list[tf.DType], shapes: list[tf.TensorShape], columns: list[np.ndarray]
) -> None:
    """Raises InvalidArgumentError (Reverb's text) unless each ``[k, ...]`` column fits."""
    if len(columns) != len(dtypes):
        raise InvalidArgumentError(
            f"Number of tensors in the sample from table '{table}' did not match the expected "
            f"count. Got {len(columns)} but wanted {len(dtypes)}: pass one dtype and shape per "
            "column of the table's items."
        )
    for i, (dtype, shape, column) in enumerate(zip(dtypes, shapes, columns, strict=True)):
        got = _signature.dtype_name(column.dtype)
        want = "string" if dtype == tf.string else _signature.dtype_name(dtype.as_numpy_dtype)
        if got != want or not shape.is_compatible_with(column.shape[1:]):
            want_shape = _signature.shape_text(
                tuple(shape.as_list()) if shape.rank is not None else ()
            )
            raise InvalidArgumentError(
                f"Requested incompatible tensor at flattened index {i} from table '{table}'.  "
                f"Requested (dtype, shape): ({want}, {want_shape}).  Sampled (dtype, shape): "
                f"({got}, {_signature.shape_text(column.shape[1:])}). Pass the dtypes and "
                "shapes of the table's items (from_table_signature reads them from its signature)."
            )


def _draw(client: Client, table: str, n: int, timeout_s: float | None) -> dict[str, Any]:
    """Up to ``n`` samples in one call (the timeout applies to the rate limiter)."""
    return client.channel.call(
        "sample", {"table": table, "num_samples": int(n), "timeout": timeout_s}, None
    )


def _chunks(
    server_address: Any,
    table: Any,
    dtypes: list[tf.DType],
    shapes: list[tf.TensorShape],
    chunk: int,
    max_samples: int,
    timeout_ms: int,
    exact: bool,
) -> Iterator[tuple[np.ndarray, ...]]:
    """Yields ``(key, probability, table_size, priority, times_sampled, *columns)`` chunks
    of up to ``chunk`` rows (exactly ``chunk`` with ``exact``), ``max_samples`` in all."""
    address, name = _text(server_address), _text(table)
    client = Client(address)
    timeout_s = None if timeout_ms < 0 else timeout_ms / 1000.0
    left = max_samples
    info_np = SampleInfo.np_dtypes()
    while left != 0:
        want = chunk if left < 0 else min(chunk, left)
        parts: list[tuple[np.ndarray, ...]] = []
        got = 0
        while got < want:
            try:
                out = _draw(client, name, want - got, timeout_s)
            except DeadlineExceededError:  # the rate limiter's timeout: the dataset ends
                return
            info = out["info"]
            keys = info["key"]
            k = len(keys)
            fields = tuple(
                np.asarray(info[f], d) for f, d in zip(SampleInfo._fields, info_np, strict=True)
            )
            for group in out["groups"]:
                columns = [np.asarray(c) for c in group["columns"]]
                _check_columns(name, dtypes, shapes, columns)
                index = group["index"]
                whole = len(out["groups"]) == 1
                part = fields if whole else tuple(f[index] for f in fields)
                parts.append((*part, *columns))
            got += k
            if not exact:
                break
        left -= got
        if len(parts) == 1:
            yield parts[0]
        else:
            if any(
                p[5 + i].shape[1:] != parts[0][5 + i].shape[1:]
                for p in parts
                for i in range(len(dtypes))
            ):
                yield from parts  # different item lengths: one chunk per layout
            else:
                yield tuple(np.concatenate(cols) for cols in zip(*parts, strict=True))


def sample_chunks(
    server_address: Any,
    table: Any,
    dtypes: list[tf.DType],
    shapes: list[tf.TensorShape],
    chunk: int,
    *,
    max_samples: int = -1,
    rate_limiter_timeout_ms: int = -1,
    exact: bool = False,
    num_workers: int = 1,
) -> tf.data.Dataset:
    """A dataset of sample chunks: flat tuples ``(key [k], probability [k], table_size [k],
    priority [k], times_sampled [k], *columns [k, *shape])``, each chunk one (or, with
    ``exact``, as many as it takes to draw ``chunk`` rows) vectorized client call(s).

    ``server_address``/``table`` may be string tensors. ``num_workers`` > 1 runs that
    many samplers on threads (each with its own ``max_samples``; pass -1), their chunks
    served in the order drawn.
    """
    info_specs = tuple(tf.TensorSpec([None], d) for d in _INFO_DTYPES)
    data_specs = tuple(
        tf.TensorSpec([None, *s.as_list()] if s.rank is not None else None, d)
        for d, s in zip(dtypes, shapes, strict=True)
    )
    signature = info_specs + data_specs

    def generate(address: Any, name: Any) -> Iterator[tuple[np.ndarray, ...]]:
        def one() -> Iterator[tuple[np.ndarray, ...]]:
            return _chunks(
                address, name, dtypes, shapes, chunk, max_samples, rate_limiter_timeout_ms, exact
            )

        return one() if num_workers <= 1 else _merged([one() for _ in range(num_workers)])

    dataset = tf.data.Dataset.from_generator(
        generate, output_signature=signature, args=(server_address, table)
    )
    return dataset.with_options(no_read_ahead())


def no_read_ahead() -> tf.data.Options:
    """tf.data options that draw nothing ahead (read-ahead serves staler samples, and
    on a table that runs dry keeps a draw waiting that the iterator's end waits for)."""
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.parallel_batch = False
    options.experimental_optimization.map_parallelization = False
    return options


_DONE = object()


def _merged(samplers: list[Iterator[Any]]) -> Iterator[Any]:
    """The chunks of ``samplers``, each run by a daemon thread, in the order drawn.

    Every drawn chunk is served (a sampler blocked by the rate limiter holds nothing
    back), and a sampler draws its next chunk only once its last one was handed over:
    at most ``2 * len(samplers)`` chunks are drawn and not yet served. An error of a
    sampler is raised here; closing this generator stops the samplers at their next
    chunk (one blocked by the rate limiter ends when its draw returns).
    """
    handed: queue.Queue[Any] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def run(sampler: Iterator[Any]) -> None:
        try:
            for item in sampler:
                while not stop.is_set():
                    try:
                        handed.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            handed.put(_DONE)
        except BaseException as err:  # handed over to the consumer, raised there
            handed.put(err)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in samplers]
    for thread in threads:
        thread.start()
    running = len(threads)
    try:
        while running:
            item = handed.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()


def _lists_to_tuples(structure: Any) -> Any:
    if isinstance(structure, list):
        return tuple(_lists_to_tuples(x) for x in structure)
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*(_lists_to_tuples(x) for x in structure))
    if isinstance(structure, tuple):
        return tuple(_lists_to_tuples(x) for x in structure)
    if isinstance(structure, dict):
        return type(structure)((k, _lists_to_tuples(v)) for k, v in structure.items())
    return structure


class TrajectoryDataset(WrappedDataset):
    """A ``tf.data.Dataset`` of ``ReplaySample(info, data)`` sampled from a Reverb table.

    Args:
        server_address: ``"host:port"`` of a :class:`~recollect.reverb.Server` (str or
            string tensor).
        table: the table's name (str or string tensor).
        dtypes: nest of ``tf.DType`` of ``data``; ``shapes``: the same nest of shapes
            (item lengths included, e.g. ``[T, 17]``; None dims: any size).
        max_in_flight_samples_per_worker: samples drawn per client call (>= 1).
        num_workers_per_iterator: samplers per iterator (-1: one).
        max_samples_per_stream: checked as Reverb does; otherwise unused.
        rate_limiter_timeout_ms: -1 waits forever; else the dataset ends once the
            rate limiter kept a draw waiting that long.
        max_samples: -1 endless; else the dataset ends after that many samples and
            never draws more.

    Raises:
        ValueError: ``dtypes`` and ``shapes`` differ in structure, or an argument is out of
            range (Reverb's messages; recollect ``InvalidArgumentError``).
    """

    def __init__(
        self,
        server_address: Any,
        table: Any,
        dtypes: Any,
        shapes: Any,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
    ) -> None:
        tf.nest.assert_same_structure(dtypes, shapes, check_types=False)
        check_dataset_arguments(
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
        )
        dtypes = _lists_to_tuples(tf.nest.map_structure(tf.as_dtype, dtypes))
        shapes = _lists_to_tuples(tf.nest.map_structure(tf.TensorShape, shapes))
        self._server_address = server_address
        self._table = table
        all_dtypes = ReplaySample(SampleInfo(*_INFO_DTYPES), dtypes)
        all_shapes = ReplaySample(SampleInfo(*[tf.TensorShape([])] * 5), shapes)
        self._max_in_flight_samples_per_worker = max_in_flight_samples_per_worker
        self._num_workers_per_iterator = num_workers_per_iterator
        self._max_samples_per_stream = max_samples_per_stream
        self._rate_limiter_timeout_ms = rate_limiter_timeout_ms
        self._max_samples = max_samples
        workers = 1 if max_samples != -1 else max(1, num_workers_per_iterator)
        flat_dtypes = tf.nest.flatten(dtypes)
        flat_shapes = tf.nest.flatten(shapes, expand_composites=False)
        chunks = sample_chunks(
            server_address,
            table,
            flat_dtypes,
            [self._item_shape(s) for s in flat_shapes],
            max_in_flight_samples_per_worker,
            max_samples=max_samples,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            num_workers=workers,
        )
        data_structure = dtypes
        rows = self._rows

        def pack(*flat: Any) -> ReplaySample:
            flat = rows(flat)
            return ReplaySample(
                SampleInfo(*flat[:5]), tf.nest.pack_sequence_as(data_structure, list(flat[5:]))
            )

        super().__init__(chunks.map(pack).unbatch(), all_shapes, all_dtypes)

    @staticmethod
    def _item_shape(shape: tf.TensorShape) -> tf.TensorShape:
        """The shape of one item's column, given the shape of one element's leaf."""
        return shape

    @staticmethod
    def _rows(flat: tuple[Any, ...]) -> tuple[Any, ...]:
        """A chunk (info fields ``[k]``, columns ``[k, ...]``) as the rows of elements."""
        return flat

    @classmethod
    def from_table_signature(
        cls,
        server_address: str,
        table: str,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        get_signature_timeout_secs: int | None = None,
        max_samples: int = -1,
    ) -> Any:
        """A dataset of this class whose dtypes and shapes are the table's signature (for
        ``TimestepDataset``: the signature of one timestep).

        Raises:
            ValueError: no table ``table`` on the server, or it has no signature.
            DeadlineExceededError: the server did not answer within
                ``get_signature_timeout_secs``.
        """
        info = Client(server_address).server_info(get_signature_timeout_secs)
        if table not in info:
            raise InvalidArgumentError(
                f"Server at {server_address} does not contain any table named {table}. "
                f"Found: {', '.join(sorted(info.keys()))}."
            )
        signature = info[table].signature
        if not signature:
            raise InvalidArgumentError(
                f"Table {table} at {server_address} does not have a signature."
            )

        def is_spec(x: Any) -> bool:
            return hasattr(x, "shape") and hasattr(x, "dtype")

        shapes = _map_specs(lambda s: tf.TensorShape(s.shape), signature, is_spec)
        dtypes = _map_specs(
            lambda s: (
                tf.string
                if np.dtype(_numpy(s.dtype)).kind in "OSU"
                else tf.as_dtype(_numpy(s.dtype))
            ),
            signature,
            is_spec,
        )
        return cls(
            server_address=server_address,
            table=table,
            shapes=shapes,
            dtypes=dtypes,
            max_in_flight_samples_per_worker=max_in_flight_samples_per_worker,
            num_workers_per_iterator=num_workers_per_iterator,
            max_samples_per_stream=max_samples_per_stream,
            rate_limiter_timeout_ms=rate_limiter_timeout_ms,
            max_samples=max_samples,
        )


def _numpy(dtype: Any) -> Any:
    if isinstance(dtype, tf.DType):
        return np.dtype(object) if dtype == tf.string else dtype.as_numpy_dtype
    return dtype


def _map_specs(fn: Any, signature: Any, is_spec: Any) -> Any:
    if is_spec(signature):
        return fn(signature)
    if isinstance(signature, dict):
        return type(signature)((k, _map_specs(fn, v, is_spec)) for k, v in signature.items())
    if isinstance(signature, tuple) and hasattr(signature, "_fields"):
        return type(signature)(*(_map_specs(fn, v, is_spec) for v in signature))
    if isinstance(signature, (list, tuple)):
        return type(signature)(_map_specs(fn, v, is_spec) for v in signature)
    return signature


class TimestepDataset(TrajectoryDataset):
    """Reverb's (deprecated) ``TimestepDataset``: the timesteps of sampled items, one
    element each.

    Each sampled item of ``T`` steps yields ``T`` consecutive elements
    ``ReplaySample(info, data)``: ``info`` the item's (scalar fields, the same for its
    ``T`` elements), ``data`` one step, shaped like ``dtypes``/``shapes`` (the shapes of
    ONE step, without the time axis). Nothing marks where an item ends (as in Reverb):
    ``.batch(T)`` of items of ``T`` steps gives back the items; ``TrajectoryDataset``
    does that directly. ``max_samples`` counts items. Arguments, checks, errors and
    ``from_table_signature`` (the signature of one step) are ``TrajectoryDataset``'s.

    Raises:
        ValueError: as ``TrajectoryDataset``.
        tf.errors.InvalidArgumentError (from the iterator): the columns of an item have
            different lengths, or a step does not match ``dtypes``/``shapes``.
    """

    @staticmethod
    def _item_shape(shape: tf.TensorShape) -> tf.TensorShape:
        if shape.rank is None:
            return shape
        return tf.TensorShape([None, *shape.as_list()])

    @staticmethod
    def _rows(flat: tuple[Any, ...]) -> tuple[Any, ...]:
        columns = flat[5:]
        steps = tf.shape(columns[0])[1]
        for column in columns[1:]:
            tf.debugging.assert_equal(
                tf.shape(column)[1],
                steps,
                message="TimestepDataset: the columns of an item have different numbers of "
                "timesteps; sample such items with TrajectoryDataset.",
            )
        info = tuple(tf.repeat(f, steps) for f in flat[:5])  # [k] -> [k * T], item by item

        def steps_of(column: tf.Tensor) -> tf.Tensor:  # [k, T, ...] -> [k * T, ...]
            out = tf.reshape(column, tf.concat([[-1], tf.shape(column)[2:]], 0))
            out.set_shape(tf.TensorShape([None]).concatenate(column.shape[2:]))
            return out

        return (*info, *(steps_of(c) for c in columns))
