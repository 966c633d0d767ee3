"""TF-Agents' ``PyUniformReplayBuffer`` (numpy in and out) over a
:class:`~recollect.ReplayBuffer`."""

from __future__ import annotations

from typing import Any

import optree

from recollect.adapters import tf_data
from recollect.extras import missing_extra
from recollect.tf_agents.base import BufferModule, items_only, to_numpy
from recollect.tf_agents.reads import get_next

try:
    import tensorflow as tf
except ImportError as err:
    raise missing_extra(err, "recollect.tf_agents") from None

__all__ = ["PyUniformReplayBuffer"]


class PyUniformReplayBuffer(BufferModule):
    """TF-Agents' ``PyUniformReplayBuffer``: one ring of ``capacity`` items, numpy in and out.

    A ``tf.Module``: ``tf.train.Checkpoint(replay_buffer=rb)`` saves and
    restores its items, write position and sampling rng.

    Args:
        data_spec: nest of specs of one item.
        capacity: items stored; the oldest are overwritten first.
        rng: seed or ``np.random.Generator`` for sampling (recollect extension).

    Raises:
        InvalidArgumentError, SpecError: see :class:`~recollect.ReplayBuffer`.
    """

    def __init__(self, data_spec: Any, capacity: int, *, rng: Any = None) -> None:
        super().__init__(data_spec, capacity, 1, rng, "PyUniformReplayBuffer")

    @property
    def capacity(self) -> int:
        """Items the buffer holds (a Python int, as TF-Agents' Python buffer)."""
        return self._capacity_int

    @property
    def size(self) -> int:
        """Items currently stored."""
        return self._buffer.num_frames()

    def add_batch(self, items: Any) -> None:
        """Adds one item given with a leading batch dim of 1 (as TF-Agents requires).

        Raises:
            SpecError, ShapeError, DTypeError, CastError: nothing is written.
        """
        self._buffer.add_batch(optree.tree_map(to_numpy, items, none_is_leaf=False))

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
        items, _ = get_next(self._buffer, sample_batch_size, num_steps, time_stacked)
        return items

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> tf.data.Dataset:
        """A ``tf.data.Dataset`` of sampled items (no ``BufferInfo``, as TF-Agents' Python buffer).

        See :func:`recollect.tf_data.as_dataset`; ``single_deterministic_pass``
        iterates the stored windows once, oldest first.
        """
        if single_deterministic_pass:
            dataset = tf_data.as_dataset(
                self._buffer, sample_batch_size, num_steps, num_parallel_calls, True
            )
            return dataset.map(items_only)
        return self._sampling_dataset(sample_batch_size, num_steps, num_parallel_calls)

    def _dataset_element(self, sample_batch_size: int | None, num_steps: int | None) -> Any:
        return items_only  # items only, as TF-Agents' Python buffer

    def gather_all(self) -> Any:
        """All stored items, numpy leaves ``[1, size, ...]``, oldest first."""
        return self._buffer.gather_all()

    def num_frames(self) -> int:
        """Items currently stored."""
        return self._buffer.num_frames()

    def clear(self) -> None:
        """Forgets every item."""
        self._buffer.clear()
