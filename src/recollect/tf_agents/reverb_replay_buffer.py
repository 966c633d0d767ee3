"""TF-Agents' ``ReverbReplayBuffer`` (``tf_agents.replay_buffers.reverb_replay_buffer``)
on :mod:`recollect.reverb`: switching that import and ``import reverb`` to
``import recollect.reverb as reverb`` is the whole change.

TF-Agents 0.19's class is the specification: constructor arguments, ``as_dataset``
elements ``(data, info)`` where ``data`` is nested like ``data_spec`` with leaves
``[sample_batch_size, num_steps, *shape]`` and ``info`` is a Reverb ``SampleInfo``
whose fields (key uint64, probability float64, table_size int64, priority
float64, times_sampled int32) are repeated along the time axis
(``[sample_batch_size, num_steps]``); ``num_frames()`` is the table's item count;
``add_batch``, ``get_next`` and ``gather_all`` raise ``NotImplementedError``
(write with :mod:`recollect.tf_agents.reverb_utils` observers).

Sampling: when each item is one element (``num_steps`` None or equal to
``sequence_length``) and no ``sequence_preprocess_fn`` is given, every batch is
drawn in one vectorized client call when the pipeline asks for it (no
interleave of per-item datasets); otherwise TF-Agents' pipeline (items cut into
``num_steps`` windows, shuffled, batched) runs on chunks drawn the same way.
``num_parallel_calls`` > 1 runs up to 4 samplers interleaved. TF-Agents and
dm-reverb are not needed: ``data_spec`` leaves may be ``tf.TensorSpec``, TF-Agents
array specs or :class:`~recollect.ArraySpec`, in any nest (TF-Agents'
``Trajectory`` or a stand-in).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.extras import missing_extra

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_agents") from None

from recollect.errors import InvalidArgumentError
from recollect.reverb.client import Client
from recollect.reverb.datasets import no_read_ahead, sample_chunks
from recollect.reverb.replay_sample import SampleInfo
from recollect.reverb.reverb_types import TableInfo
from recollect.reverb.tf_client import TFClient
from recollect.tf_agents.base import SpecModule

__all__ = ["DEFAULT_TABLE", "ReverbReplayBuffer", "truncate_reshape_rows_by_num_steps"]

DEFAULT_TABLE = "experience"
#: the most samplers ``as_dataset`` interleaves for ``num_parallel_calls``
MAX_SAMPLERS = 4


def _is_spec(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _tf_dtype(spec: Any) -> tf.DType:
    dtype = spec.dtype
    if isinstance(dtype, tf.DType):
        return dtype
    return tf.string if np.dtype(dtype).kind in "OSU" else tf.as_dtype(np.dtype(dtype))


def _shape(spec: Any) -> list[int | None]:
    shape = spec.shape
    return list(shape.as_list()) if isinstance(shape, tf.TensorShape) else list(shape)


class ReverbReplayBuffer(SpecModule):
    """A Reverb table as a TF-Agents replay buffer.

    Args:
        data_spec: nest of specs of one step (e.g. the agent's ``collect_data_spec``).
        table_name: the table to sample.
        sequence_length: steps per item (as the observer writes them), or None (any).
        server_address: ``"host:port"``; exactly one of it and ``local_server``.
        local_server: a :class:`recollect.reverb.Server`.
        dataset_buffer_size: samples drawn per call by the general pipeline (default
            3x the batch size per sampler).
        max_cycle_length, num_workers_per_iterator, max_samples_per_stream: TF-Agents'
            arguments, kept (the first bounds the samplers as TF-Agents' interleave).
        rate_limiter_timeout_ms: -1 waits forever; else a dataset ends once the rate
            limiter kept a draw waiting that long.

    Raises:
        ValueError: not exactly one of ``server_address`` and ``local_server``.
        KeyError: the server has no table ``table_name`` (as TF-Agents).
    """

    def __init__(
        self,
        data_spec: Any,
        table_name: str,
        sequence_length: int | None,
        server_address: str | None = None,
        local_server: Any = None,
        dataset_buffer_size: int | None = None,
        max_cycle_length: int = 32,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
    ) -> None:
        if (server_address is None) == (local_server is None):
            raise InvalidArgumentError(
                "Exactly one of the server_address or local_server must be provided."
            )
        super().__init__(data_spec, "ReverbReplayBuffer")
        self._table_name = table_name
        self._sequence_length = sequence_length
        self._local_server = local_server
        self._server_address: str = (
            f"localhost:{local_server.port}" if local_server is not None else str(server_address)
        )
        self._dataset_buffer_size = dataset_buffer_size
        self._max_cycle_length = max_cycle_length
        self._num_workers_per_iterator = num_workers_per_iterator
        self._max_samples_per_stream = max_samples_per_stream
        self._rate_limiter_timeout_ms = rate_limiter_timeout_ms
        self._py_client = Client(self._server_address)
        self._tf_client = TFClient(self._server_address, "rb_tf_client")
        self._table_info = self.get_table_info()
        sampler = self._table_info.sampler_options
        remover = self._table_info.remover_options
        self._deterministic_table = bool(
            getattr(sampler, "is_deterministic", False)
            and getattr(remover, "is_deterministic", False)
        )
        self._capacity = int(self._table_info.max_size)
        self._stateful_dataset = True
        specs = tf.nest.flatten(data_spec)
        if not all(_is_spec(s) for s in specs):
            raise InvalidArgumentError(
                f"data_spec leaves must be specs with shape and dtype; got {specs!r}."
            )
        self._dtypes = [_tf_dtype(s) for s in specs]
        self._step_shapes = [_shape(s) for s in specs]

    # ------------------------------------------------------------ properties
    @property
    def capacity(self) -> int:
        """The table's ``max_size``."""
        return self._capacity

    @property
    def stateful_dataset(self) -> bool:
        return self._stateful_dataset

    @property
    def py_client(self) -> Client:
        return self._py_client

    @property
    def tf_client(self) -> TFClient:
        return self._tf_client

    @property
    def local_server(self) -> Any:
        return self._local_server

    def get_table_info(self) -> TableInfo:
        """The table's current :class:`~recollect.reverb.TableInfo` (a server call)."""
        return self._py_client.server_info()[self._table_name]

    def num_frames(self) -> int:
        """The number of items in the table (TF-Agents counts items, not steps)."""
        return int(self.get_table_info().current_size)

    def clear(self) -> None:
        """Empties the table (and resets its rate limiter)."""
        self._py_client.reset(self._table_name)

    def update_priorities(self, keys: Any, priorities: Any) -> Any:
        """Sets the priorities of item ``keys`` (uint64 ``[N]``) to ``priorities``
        (float64 ``[N]``); see :meth:`TFClient.update_priorities`."""
        return self._tf_client.update_priorities(self._table_name, keys, priorities)

    def add_batch(self, items: Any) -> None:
        """Not supported (as TF-Agents): write with ``reverb_utils`` observers.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            "ReverbReplayBuffer does not support `add_batch`. See "
            "`reverb_utils.ReverbObserver` for more information on how to add data "
            "to the buffer."
        )

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> None:
        """Not supported (as TF-Agents): use :meth:`as_dataset`.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("ReverbReplayBuffer does not support `get_next`.")

    def gather_all(self) -> None:
        """Not supported (as TF-Agents).

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("ReverbReplayBuffer does not support `gather_all`.")

    # ------------------------------------------------------------ datasets
    def _verify_num_steps(self, num_steps: int | None) -> None:
        if num_steps and self._sequence_length:
            if num_steps > self._sequence_length:
                raise InvalidArgumentError(
                    "Can not guarantee sequential data for num_steps as sequence "
                    "length of the data is smaller.  This is not supported.  "
                    f"num_steps > sequence_length ({num_steps} vs. {self._sequence_length})"
                )
            if self._sequence_length % num_steps != 0:
                raise InvalidArgumentError(
                    "Can not guarantee sequential data since sequence_length is not a "
                    f"multiple of num_steps ({num_steps} vs. {self._sequence_length})"
                )

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        sequence_preprocess_fn: Any = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """A dataset of ``(data, info)`` sampled from the table (see the module docstring).

        Args:
            sample_batch_size: items per element (None: no batch axis).
            num_steps: steps per element (None: the whole item); must divide
                ``sequence_length``.
            num_parallel_calls: <= ``sample_batch_size``; > 1 interleaves samplers.
            sequence_preprocess_fn: applied to each item's data ``[T, ...]`` before it is
                cut into ``num_steps`` windows.
            single_deterministic_pass: one sample at a time from one sampler (the table
                must have a deterministic sampler and remover, e.g. a queue).

        Raises:
            ValueError: ``num_steps`` does not divide ``sequence_length``,
                ``num_parallel_calls`` > ``sample_batch_size``, or a single deterministic
                pass over a non-deterministic table (TF-Agents' messages).
        """
        self._verify_num_steps(num_steps)
        if single_deterministic_pass:
            if not self._deterministic_table:
                raise InvalidArgumentError(
                    "Unable to perform a single deterministic pass over the dataset, "
                    "since either the sampler or the remover is not deterministic "
                    f"(FIFO or Heap).  Table info:\n{self._table_info}"
                )
            dataset = self._general_dataset(
                sample_batch_size, num_steps, sequence_preprocess_fn, 1, 1, shuffle=False
            )
        else:
            if num_parallel_calls and sample_batch_size and num_parallel_calls > sample_batch_size:
                raise InvalidArgumentError(
                    "num_parallel_calls cannot be bigger than sample_batch_size "
                    f"{num_parallel_calls} > {sample_batch_size}"
                )
            total = sample_batch_size or 1
            cycle = max(1, min(total, self._max_cycle_length))
            workers = max(1, min(num_parallel_calls or 1, cycle, MAX_SAMPLERS))
            whole_items = not num_steps or num_steps == self._sequence_length
            if sample_batch_size and whole_items and sequence_preprocess_fn is None:
                dataset = self._batched_dataset(sample_batch_size, workers)
            else:
                chunk = self._dataset_buffer_size or 3 * max(1, total // cycle)
                dataset = self._general_dataset(
                    sample_batch_size,
                    num_steps,
                    sequence_preprocess_fn,
                    chunk,
                    workers,
                    shuffle=True,
                )
        options = no_read_ahead()  # no staler samples, no draw left waiting at the end
        options.deterministic = False
        if hasattr(options, "experimental_allow_stateful"):
            options.experimental_allow_stateful = True
        return dataset.with_options(options)

    def _item_shapes(self) -> list[tf.TensorShape]:
        return [tf.TensorShape([self._sequence_length, *s]) for s in self._step_shapes]

    def _pack(self, flat: tuple[Any, ...]) -> tuple[Any, SampleInfo]:
        """``(data, info)`` from a chunk ``(info fields [k], columns [k, T, ...])``: info
        repeated along the time axis (``[k, T]``), as TF-Agents' ``broadcast_info``."""
        columns = list(flat[5:])
        first = columns[0]
        length = first.shape[1] if first.shape[1] is not None else tf.shape(first)[1]
        info = SampleInfo(*(tf.repeat(f[:, None], length, axis=1) for f in flat[:5]))
        return tf.nest.pack_sequence_as(self.data_spec, columns), info

    def _chunks(self, size: int, workers: int, exact: bool) -> tf.data.Dataset:
        """Chunks of ``size`` whole items from ``workers`` samplers (``sample_chunks``)."""
        return sample_chunks(
            self._server_address,
            self._table_name,
            self._dtypes,
            self._item_shapes(),
            size,
            rate_limiter_timeout_ms=self._rate_limiter_timeout_ms,
            exact=exact,
            num_workers=workers,
        )

    def _batched_dataset(self, batch_size: int, workers: int) -> tf.data.Dataset:
        """Batches of whole items: one sampler draws each batch in one call (or as many as
        the table's items take); several samplers draw up to a batch per call each, and
        their draws are batched together (a sampler never holds a part batch back while
        the others wait: each draw is served)."""
        chunks = self._chunks(batch_size, workers, exact=workers == 1)
        if workers > 1:
            rows = chunks.map(lambda *flat: self._pack(flat)).unbatch()
            return rows.batch(batch_size, drop_remainder=True)

        def element(*flat: Any) -> tuple[Any, SampleInfo]:
            data, info = self._pack(flat)
            fix = lambda t: tf.ensure_shape(t, [batch_size, *t.shape[1:]])  # noqa: E731
            return tf.nest.map_structure(fix, data), tf.nest.map_structure(fix, info)

        return chunks.map(element)

    def _general_dataset(
        self,
        sample_batch_size: int | None,
        num_steps: int | None,
        sequence_preprocess_fn: Any,
        chunk: int,
        workers: int,
        shuffle: bool,
    ) -> tf.data.Dataset:
        dataset = (
            self._chunks(chunk, workers, exact=False).map(lambda *flat: self._pack(flat)).unbatch()
        )
        if sequence_preprocess_fn is not None:
            dataset = dataset.map(lambda data, info: (sequence_preprocess_fn(data), info))
        if num_steps and num_steps != self._sequence_length:
            dataset = dataset.map(
                lambda *s: truncate_reshape_rows_by_num_steps(s, num_steps)
            ).unbatch()
            if shuffle:
                size = self._sequence_length // num_steps if self._sequence_length else 100
                total = sample_batch_size or 1
                size *= max(1, total // max(1, min(total, self._max_cycle_length)))
                dataset = dataset.shuffle(size)
        if sample_batch_size:
            dataset = dataset.batch(sample_batch_size, drop_remainder=True)
        return dataset


def truncate_reshape_rows_by_num_steps(sample: Any, num_steps: int) -> Any:
    """Each tensor ``[T, ...]`` of ``sample`` truncated to a multiple of ``num_steps`` and
    reshaped to ``[T // num_steps, num_steps, ...]`` (TF-Agents' function)."""
    first = tf.nest.flatten(sample)[0]
    static = tf.compat.dimension_value(first.shape[0])
    rows = static // num_steps if static is not None else tf.shape(first)[0] // num_steps

    def cut(t: Any) -> Any:
        out = tf.reshape(
            t[: rows * num_steps, ...], tf.concat(([rows, num_steps], tf.shape(t)[1:]), axis=0)
        )
        out.set_shape(
            [static // num_steps if static is not None else None, num_steps, *t.shape[1:]]
        )
        return out

    return tf.nest.map_structure(cut, sample)
