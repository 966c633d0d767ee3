"""What both TF-Agents buffers share: a trackable ``tf.Module`` holding a
:class:`~recollect.ReplayBuffer` (and its checkpoint state), and their tensor helpers."""

from __future__ import annotations

import types
from typing import Any

import optree

from recollect.adapters import tf_data
from recollect.buffers.replay_buffer import ReplayBuffer
from recollect.buffers.sample import BufferInfo
from recollect.extras import missing_extra
from recollect.specs import FlatSpec
from recollect.tf_agents.checkpoint import TrackableBufferState

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_agents") from None

__all__ = ["BufferModule", "items_only", "to_numpy", "unstack_time"]


def to_numpy(x: Any) -> Any:
    return x.numpy() if isinstance(x, tf.Tensor | tf.Variable) else x


def items_only(items: Any, info: BufferInfo) -> Any:
    """The items of an ``(items, info)`` element (a dataset map function)."""
    return items


def unstack_time(items: Any, time_axis: int, num_steps: int) -> tuple[Any, ...]:
    return tuple(
        optree.tree_map(lambda x, k=k: tf.gather(x, k, axis=time_axis), items, none_is_leaf=False)
        for k in range(num_steps)
    )


class SpecModule(tf.Module):
    """A ``tf.Module`` with the ``data_spec`` it was given (the TF-Agents buffers' base)."""

    def __init__(self, data_spec: Any, name: str) -> None:
        super().__init__(name=name)
        # held outside tf.Module's attribute tracking, which would wrap dicts and lists
        self._spec_box = types.SimpleNamespace(spec=data_spec)

    @property
    def data_spec(self) -> Any:
        """The spec given to the constructor."""
        return self._spec_box.spec


class BufferModule(SpecModule):
    """Shared by both buffers: a trackable ``tf.Module`` whose checkpoint holds the buffer."""

    def __init__(self, data_spec: Any, capacity: int, num_envs: int, rng: Any, name: str) -> None:
        super().__init__(data_spec, name)
        self._buffer = ReplayBuffer(data_spec, capacity, num_envs=num_envs, rng=rng)
        self._flat: FlatSpec = self._buffer.writer.flat_spec
        self._capacity_int = capacity
        # tf.train.Checkpoint / common.Checkpointer save and restore this (recollect's state
        # format inside a PythonState: data, positions, episode ends, sampling rng).
        self._state = TrackableBufferState(self._buffer, self._on_restore)

    def _on_restore(self) -> None:
        """Called after a checkpoint restored the buffer (datasets must not reuse old draws)."""

    @property
    def buffer(self) -> ReplayBuffer:
        """The underlying :class:`~recollect.ReplayBuffer`."""
        return self._buffer

    def _sampling_dataset(
        self,
        sample_batch_size: int | None,
        num_steps: int | None,
        num_parallel_calls: int | None,
        **options: Any,
    ) -> tf.data.Dataset:
        dataset = tf_data.as_dataset(
            self._buffer, sample_batch_size, num_steps, num_parallel_calls, **options
        )
        return tf_data.map_element(dataset, self._dataset_element(sample_batch_size, num_steps))

    def _dataset_element(self, sample_batch_size: int | None, num_steps: int | None) -> Any:
        raise NotImplementedError
