"""TF-Agents' ``TFUniformReplayBuffer`` (tensors in and out, ``tf.function``-ready) over a
:class:`~recollect.ReplayBuffer`."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from recollect.adapters import tf_data
from recollect.buffers.sample import BufferInfo
from recollect.errors import InvalidArgumentError
from recollect.extras import missing_extra
from recollect.tf_agents.base import BufferModule, to_numpy, unstack_time
from recollect.tf_agents.deterministic import check_drop_remainder, deterministic_pass
from recollect.tf_agents.empty import EmptyBufferError, empty_error
from recollect.validation import check_structure

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_agents") from None

__all__ = ["TFUniformReplayBuffer"]


class _Generation:
    """The int64 variable a TFUniformReplayBuffer bumps after each write (not checkpointed)."""

    def __init__(self) -> None:
        self.variable = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")

    def bump(self) -> Any:
        return self.variable.assign_add(1, read_value=False)


class TFUniformReplayBuffer(BufferModule):
    """TF-Agents' ``TFUniformReplayBuffer``: ``batch_size`` rows of ``max_length`` items, tensors.

    A ``tf.Module``: ``tf.train.Checkpoint(replay_buffer=rb)`` (and TF-Agents'
    ``common.Checkpointer(dir, replay_buffer=rb)``) saves and restores its
    items, positions, episode ends and sampling rng.

    Args:
        data_spec: nest of specs (``tf.TensorSpec`` ...) of one item.
        batch_size: rows; ``add_batch`` leaves have this leading dim.
        max_length: items per row; ``capacity = batch_size * max_length``.
        scope, device: accepted for compatibility; unused (storage is numpy).
        table_fn: must be None (TF-Agents' table factory; storage is recollect's).
        dataset_drop_remainder: in a single deterministic pass, drop a last
            batch of fewer than ``sample_batch_size`` rows and a row's last
            window shorter than ``num_steps`` (static shapes), as TF-Agents.
        dataset_window_shift: in a single deterministic pass with
            ``num_steps``, windows start every this many steps (None:
            ``num_steps``, no overlap), as TF-Agents.
        stateful_dataset: ``as_dataset`` sets ``experimental_allow_stateful``
            on its options where TensorFlow has that option, as TF-Agents.
        rng: seed or ``np.random.Generator`` for sampling (recollect extension).

    Raises:
        InvalidArgumentError: ``table_fn`` is not None; see also
            :class:`~recollect.ReplayBuffer`.
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int,
        max_length: int = 1000,
        scope: str = "TFUniformReplayBuffer",
        device: str = "cpu:*",
        table_fn: Any = None,
        dataset_drop_remainder: bool = False,
        dataset_window_shift: int | None = None,
        stateful_dataset: bool = False,
        *,
        rng: Any = None,
    ) -> None:
        if table_fn is not None:
            raise InvalidArgumentError(
                f"table_fn={table_fn!r} is not supported: recollect stores the data in its own "
                "numpy storage; leave table_fn=None."
            )
        super().__init__(data_spec, batch_size * max_length, batch_size, rng, scope)
        self._batch_size = batch_size
        self._max_length = max_length
        self._scope = scope
        self._device = device
        self._dtypes = [tf.as_dtype(d) for d in self._flat.dtypes]
        self._dataset_drop_remainder = bool(dataset_drop_remainder)
        self._dataset_window_shift = dataset_window_shift
        self._stateful_dataset = bool(stateful_dataset)
        self._capacity_tensor = tf.constant(batch_size * max_length, tf.int64)
        self._generation = _Generation()

    def _on_restore(self) -> None:
        self._generation.bump()

    @property
    def capacity(self) -> tf.Tensor:
        """Total items the buffer holds, an int64 scalar tensor (as TF-Agents)."""
        return self._capacity_tensor

    @property
    def batch_size(self) -> int:
        """Rows (TF-Agents: batch segments)."""
        return self._batch_size

    @property
    def max_length(self) -> int:
        """Items per row."""
        return self._max_length

    @property
    def scope(self) -> str:
        """The ``scope`` given to the constructor."""
        return self._scope

    @property
    def device(self) -> str:
        """The ``device`` given to the constructor (unused: storage is numpy)."""
        return self._device

    def add_batch(self, items: Any) -> Any:
        """Appends one item to every row; leaves ``[batch_size, *spec.shape]``.

        Eager: writes now and returns None. On symbolic tensors (inside
        ``tf.function``): returns an int64 tensor (items stored) whose
        evaluation writes.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: nothing is written
            (inside ``tf.function`` wrapped in a ``tf.errors`` error).
        """
        leaves = check_structure(self._flat, items, "add_batch")
        if tf.executing_eagerly() and not any(tf.is_symbolic_tensor(x) for x in leaves):
            self._buffer.add_batch(self._flat.unflatten([to_numpy(x) for x in leaves]))
            self._generation.bump()  # after the write: a dataset drops what it drew before
            return None

        def add_numpy(*arrays: np.ndarray) -> np.ndarray:
            self._buffer.add_batch(self._flat.unflatten(arrays))
            return np.asarray(self._buffer.num_frames(), np.int64)

        written = tf.numpy_function(add_numpy, leaves, tf.int64, stateful=True, name="add_batch")
        return self._after_write(written)

    def _after_write(self, written: Any) -> Any:
        """``written`` (an int64 tensor), run after the generation bump that follows the write."""
        with tf.control_dependencies([written]):
            bumped = self._generation.bump()
        with tf.control_dependencies([bumped]):
            return tf.identity(written)

    def _info(self, info: BufferInfo, batched: bool, num_steps: int | None, stacked: bool) -> Any:
        ids: Any = info.ids  # a tensor, or a tuple of tensors when unstacked
        if num_steps is not None:
            offsets = tf.range(num_steps, dtype=tf.int64)  # the next steps of the same row
            ids = (ids[:, None] if batched else ids[None]) + offsets
            if not stacked:
                ids = tuple(tf.unstack(ids, num=num_steps, axis=-1))
        return BufferInfo(ids, tf.cast(info.probabilities, tf.float32))

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> tuple[Any, BufferInfo]:
        """``(items, BufferInfo(ids, probabilities))`` sampled uniformly, as tensors.

        Items are ``[B, T, ...]`` (axes dropped for None arguments); with
        ``time_stacked=False`` a tuple of ``num_steps`` nests.

        Raises:
            InvalidArgumentError: ``num_steps`` > ``max_length``.
            EmptyBufferError: no valid window stored yet; it is a
                ``tf.errors.InvalidArgumentError`` (inside ``tf.function``
                TensorFlow raises that class with this message).
        """
        tf_data.check_args(self._buffer.reader, sample_batch_size, num_steps)
        fn = tf_data.make_sample_fn(
            self._buffer.reader, sample_batch_size, num_steps, False, wrap_error=empty_error
        )
        items, info, _ = fn(tf.constant(0, tf.int64))
        if num_steps is not None and not time_stacked:
            items = unstack_time(items, 0 if sample_batch_size is None else 1, num_steps)
        return items, self._info(info, sample_batch_size is not None, num_steps, time_stacked)

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """A ``tf.data.Dataset`` of ``(items, BufferInfo)``, as TF-Agents' ``as_dataset``.

        Sampling mode (see :func:`recollect.tf_data.as_dataset`): an element
        asked for after ``add_batch`` returned is drawn from a table that holds
        that step, except elements a ``num_parallel_calls``/``prefetch`` of
        the pipeline holds already. ``single_deterministic_pass=True``: row by
        row, oldest first, windows of ``num_steps`` every
        ``dataset_window_shift`` steps (see
        :mod:`recollect.tf_agents.deterministic`); ``BufferInfo.probabilities``
        is ``()`` there, as in TF-Agents.

        Raises:
            InvalidArgumentError (a ValueError): bad sizes; with
                ``dataset_drop_remainder`` and a deterministic pass,
                ``sample_batch_size`` > ``batch_size`` or ``num_steps`` >
                ``max_length`` ("ALL data will be dropped").
            EmptyBufferError: (while iterating, as ``tf.errors.InvalidArgumentError``)
                no valid window is stored.
        """
        if single_deterministic_pass:
            tf_data.check_args(None, sample_batch_size, num_steps)
            if self._dataset_drop_remainder:
                check_drop_remainder(
                    sample_batch_size, num_steps, self._batch_size, self._max_length
                )
            dataset = deterministic_pass(
                self._buffer,
                sample_batch_size,
                num_steps,
                num_parallel_calls,
                self._dataset_drop_remainder,
                self._dataset_window_shift,
                EmptyBufferError,
            )
        else:
            dataset = self._sampling_dataset(
                sample_batch_size,
                num_steps,
                num_parallel_calls,
                generation=self._generation.variable,
                wrap_error=empty_error,
            )
        if self._stateful_dataset:
            options = tf.data.Options()
            if hasattr(options, "experimental_allow_stateful"):
                options.experimental_allow_stateful = True
                dataset = dataset.with_options(options)
        return dataset

    def _dataset_element(self, sample_batch_size: int | None, num_steps: int | None) -> Any:
        def to_compat(items: Any, info: BufferInfo) -> tuple[Any, BufferInfo]:
            return items, self._info(info, sample_batch_size is not None, num_steps, True)

        return to_compat  # (items, BufferInfo) with TF-Agents' info shapes and dtypes

    def gather_all(self) -> Any:
        """All stored items, tensors ``[batch_size, steps_per_row, ...]``, oldest first."""

        def gather_numpy() -> list[np.ndarray]:
            return cast(
                list[np.ndarray], self._flat.treedef.flatten_up_to(self._buffer.gather_all())
            )

        out = tf.numpy_function(gather_numpy, [], self._dtypes, stateful=True, name="gather_all")
        if not isinstance(out, list | tuple):  # a one-leaf spec gives a tensor, not a list
            out = [out]
        for tensor, shape in zip(out, self._flat.shapes, strict=True):
            tensor.set_shape([self._batch_size, None, *shape])
        return self._flat.unflatten(list(out))

    def num_frames(self) -> tf.Tensor:
        """Items stored over all rows, int64 scalar tensor."""
        out = tf.numpy_function(
            lambda: np.int64(self._buffer.num_frames()), [], tf.int64, stateful=True
        )
        out.set_shape([])
        return out

    def clear(self) -> Any:
        """Forgets every item (ids keep increasing). Inside ``tf.function`` returns an op."""
        if tf.executing_eagerly():
            self._buffer.clear()
            self._generation.bump()
            return None

        def clear_numpy() -> np.ndarray:
            self._buffer.clear()
            return np.asarray(0, np.int64)

        cleared = tf.numpy_function(clear_numpy, [], tf.int64, stateful=True, name="clear")
        return self._after_write(cleared)
