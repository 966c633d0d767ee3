"""TF-Agents compatible replay buffers backed by a :class:`~recollect.ReplayBuffer`.

:class:`PyUniformReplayBuffer` and :class:`TFUniformReplayBuffer` keep
TF-Agents' constructor arguments, method names and return structures
(``add_batch``, ``get_next``, ``as_dataset``, ``gather_all``, ``clear``,
``num_frames``, ``capacity``, ``data_spec``); specs may be ``tf.TensorSpec``,
TF-Agents array specs or :class:`~recollect.ArraySpec`, in any nest. TF-Agents
itself is not needed: the tutorial code runs after replacing its imports with
``from recollect.tf_agents import py_uniform_replay_buffer,
tf_uniform_replay_buffer, tensor_spec``.

``TFUniformReplayBuffer`` returns tensors and works inside ``tf.function``:
``add_batch`` (e.g. as a driver observer), ``get_next``, ``gather_all`` and
``num_frames`` become ``tf.numpy_function`` ops on symbolic input.
``PyUniformReplayBuffer`` returns numpy arrays.

Deliberate differences from TF-Agents (where TF-Agents misbehaves):

- Sampling when no valid window is stored raises
  :class:`~recollect.errors.NotEnoughDataError`; TF-Agents'
  ``PyUniformReplayBuffer`` returns uninitialised ``np.empty`` garbage.
- ``num_steps`` larger than a row holds (``max_length``) raises
  :class:`~recollect.errors.InvalidArgumentError` naming ``num_steps`` and
  ``max_length``; fewer steps stored than ``num_steps`` raises
  ``NotEnoughDataError`` saying how many more are needed. TF-Agents'
  ``TFUniformReplayBuffer`` says the buffer "is empty" in both cases.
- A failed ``add_batch`` (wrong structure, shape, or an unsafe dtype cast)
  raises before anything is written and changes nothing; TF-Agents can advance
  its write position first, so zero rows get sampled later.
- Windows never span the ring's write position, and when the spec has a
  top-level bool ``is_last`` leaf they never cross an episode end.
- ``BufferInfo.ids`` are recollect item ids (unique, never reused:
  ``recollect.ids.encode(row, step_time)``), shaped like TF-Agents' (``[B, T]`` with
  ``num_steps``); ``probabilities`` are float32 ``[B]`` as in TF-Agents.
- ``PyUniformReplayBuffer.num_frames()`` works, ``gather_all()`` returns only
  stored steps (``[1, size, ...]``, oldest first) rather than every slot, and
  ``as_dataset`` accepts ``num_parallel_calls``.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import optree
import tensorflow as tf

from recollect import tf_data
from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.buffers.sample import BufferInfo
from recollect.specs import ArraySpec, FlatSpec
from recollect.validation import check_structure

__all__ = [
    "PyUniformReplayBuffer",
    "TFUniformReplayBuffer",
    "py_uniform_replay_buffer",
    "tensor_spec",
    "tf_uniform_replay_buffer",
]


def _to_numpy(x: Any) -> Any:
    return x.numpy() if isinstance(x, tf.Tensor | tf.Variable) else x


def _unstack_time(items: Any, time_axis: int, num_steps: int) -> tuple[Any, ...]:
    return tuple(
        optree.tree_map(lambda x, k=k: tf.gather(x, k, axis=time_axis), items, none_is_leaf=False)
        for k in range(num_steps)
    )


class _Base:
    def __init__(self, data_spec: Any, capacity: int, num_envs: int, rng: Any) -> None:
        self._data_spec = data_spec
        self._buffer = ReplayBuffer(data_spec, capacity, num_envs=num_envs, rng=rng)
        self._flat: FlatSpec = self._buffer.flat_spec

    @property
    def data_spec(self) -> Any:
        """The spec given to the constructor."""
        return self._data_spec

    @property
    def capacity(self) -> int:
        """Total items the buffer holds."""
        return self._buffer.capacity

    @property
    def buffer(self) -> ReplayBuffer:
        """The underlying :class:`~recollect.ReplayBuffer`."""
        return self._buffer

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """A ``tf.data.Dataset`` sampled from the buffer (see ``recollect.tf_data.as_dataset``).

        Elements are what TF-Agents' class yields: items only for
        :class:`PyUniformReplayBuffer`, ``(items, BufferInfo)`` for
        :class:`TFUniformReplayBuffer`.
        """
        dataset = tf_data.as_dataset(
            self._buffer,
            sample_batch_size,
            num_steps,
            num_parallel_calls,
            single_deterministic_pass,
        )
        return tf_data.map_element(dataset, self._dataset_element(sample_batch_size, num_steps))

    def _dataset_element(self, sample_batch_size: int | None, num_steps: int | None) -> Any:
        raise NotImplementedError


class PyUniformReplayBuffer(_Base):
    """TF-Agents' ``PyUniformReplayBuffer``: one ring of ``capacity`` items, numpy in and out.

    Args:
        data_spec: nest of specs of one item.
        capacity: items stored; the oldest are overwritten first.
        rng: seed or ``np.random.Generator`` for sampling (recollect extension).

    Raises:
        InvalidArgumentError, SpecError: see :class:`~recollect.ReplayBuffer`.
    """

    def __init__(self, data_spec: Any, capacity: int, *, rng: Any = None) -> None:
        super().__init__(data_spec, capacity, 1, rng)

    @property
    def size(self) -> int:
        """Items currently stored."""
        return self._buffer.num_frames()

    def add_batch(self, items: Any) -> None:
        """Adds one item given with a leading batch dim of 1 (as TF-Agents requires).

        Raises:
            SpecError, ShapeError, DTypeError, CastError: nothing is written.
        """
        self._buffer.add_batch(optree.tree_map(_to_numpy, items, none_is_leaf=False))

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> Any:
        """Items sampled uniformly (numpy), ``[B, T, ...]``; no ``BufferInfo`` (as TF-Agents).

        Raises:
            NotEnoughDataError: fewer than ``num_steps`` items stored.
            InvalidArgumentError: ``num_steps`` > ``capacity``.
        """
        items, _ = self._buffer.get_next(sample_batch_size, num_steps, time_stacked)
        return items

    def _dataset_element(self, sample_batch_size: int | None, num_steps: int | None) -> Any:
        return _items_only  # items only, as TF-Agents' Python buffer

    def gather_all(self) -> Any:
        """All stored items, numpy leaves ``[1, size, ...]``, oldest first."""
        return self._buffer.gather_all()

    def num_frames(self) -> int:
        """Items currently stored."""
        return self._buffer.num_frames()

    def clear(self) -> None:
        """Forgets every item."""
        self._buffer.clear()


def _items_only(items: Any, info: BufferInfo) -> Any:
    return items


class TFUniformReplayBuffer(_Base):
    """TF-Agents' ``TFUniformReplayBuffer``: ``batch_size`` rows of ``max_length`` items, tensors.

    Args:
        data_spec: nest of specs (``tf.TensorSpec`` ...) of one item.
        batch_size: rows; ``add_batch`` leaves have this leading dim.
        max_length: items per row; ``capacity = batch_size * max_length``.
        scope, device: accepted for compatibility; unused (storage is numpy).
        rng: seed or ``np.random.Generator`` for sampling (recollect extension).
    """

    def __init__(
        self,
        data_spec: Any,
        batch_size: int,
        max_length: int = 1000,
        scope: str = "TFUniformReplayBuffer",
        device: str = "cpu:*",
        *,
        rng: Any = None,
    ) -> None:
        super().__init__(data_spec, batch_size * max_length, batch_size, rng)
        self._batch_size = batch_size
        self._max_length = max_length
        self._dtypes = [tf.as_dtype(d) for d in self._flat.dtypes]

    @property
    def batch_size(self) -> int:
        """Rows (TF-Agents: batch segments)."""
        return self._batch_size

    @property
    def max_length(self) -> int:
        """Items per row."""
        return self._max_length

    def add_batch(self, items: Any) -> Any:
        """Appends one item to every row; leaves ``[batch_size, *spec.shape]``.

        Eager: writes now and returns None. On symbolic tensors (inside
        ``tf.function``): returns a stateful op that writes when run.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: nothing is written
            (inside ``tf.function`` wrapped in a ``tf.errors`` error).
        """
        leaves = check_structure(self._flat, items, "add_batch")
        if tf.executing_eagerly() and not any(tf.is_symbolic_tensor(x) for x in leaves):
            self._buffer.add_batch(self._flat.unflatten([_to_numpy(x) for x in leaves]))
            return None

        def add_numpy(*arrays: np.ndarray) -> np.ndarray:
            self._buffer.add_batch(self._flat.unflatten(arrays))
            return np.int64(self._buffer.num_frames())

        return tf.numpy_function(add_numpy, leaves, tf.int64, stateful=True, name="add_batch")

    def _info(self, info: BufferInfo, batched: bool, num_steps: int | None, stacked: bool) -> Any:
        ids = info.ids
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
            NotEnoughDataError: no valid window stored yet (inside
                ``tf.function``: a ``tf.errors`` error with this message).
        """
        tf_data.check_args(self._buffer, sample_batch_size, num_steps)
        fn = tf_data.make_sample_fn(self._buffer, sample_batch_size, num_steps, False)
        items, info, _ = fn(tf.constant(0, tf.int64))
        if num_steps is not None and not time_stacked:
            items = _unstack_time(items, 0 if sample_batch_size is None else 1, num_steps)
        return items, self._info(info, sample_batch_size is not None, num_steps, time_stacked)

    def _dataset_element(self, sample_batch_size: int | None, num_steps: int | None) -> Any:
        def to_compat(items: Any, info: BufferInfo) -> tuple[Any, BufferInfo]:
            return items, self._info(info, sample_batch_size is not None, num_steps, True)

        return to_compat  # (items, BufferInfo) with TF-Agents' info shapes and dtypes

    def gather_all(self) -> Any:
        """All stored items, tensors ``[batch_size, steps_per_row, ...]``, oldest first."""

        def gather_numpy() -> list[np.ndarray]:
            return self._flat.treedef.flatten_up_to(self._buffer.gather_all())

        out = tf.numpy_function(gather_numpy, [], self._dtypes, stateful=True, name="gather_all")
        for tensor, shape in zip(out, self._flat.shapes, strict=True):
            tensor.set_shape([self._batch_size, None, *shape])
        return self._flat.unflatten(out)

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
            return None

        def clear_numpy() -> np.ndarray:
            self._buffer.clear()
            return np.int64(0)

        return tf.numpy_function(clear_numpy, [], tf.int64, stateful=True, name="clear")


def to_nest_array_spec(nest: Any) -> Any:
    """Converts a nest of ``tf.TensorSpec`` (or any spec) to :class:`~recollect.ArraySpec`."""
    return optree.tree_map(
        ArraySpec.from_spec,
        nest,
        is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"),
        none_is_leaf=False,
    )


#: Stand-ins for the TF-Agents modules the tutorial imports.
py_uniform_replay_buffer = types.SimpleNamespace(PyUniformReplayBuffer=PyUniformReplayBuffer)
tf_uniform_replay_buffer = types.SimpleNamespace(
    TFUniformReplayBuffer=TFUniformReplayBuffer, BufferInfo=BufferInfo
)
tensor_spec = types.SimpleNamespace(TensorSpec=tf.TensorSpec, to_nest_array_spec=to_nest_array_spec)
