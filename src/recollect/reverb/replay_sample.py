"""What a sample returns (``reverb.replay_sample``): the item's info and its data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np


class SampleInfo(NamedTuple):
    """Details of a sampled item.

    Fields:
        key: the item's key (int; an ``[B]`` uint64 array when batched), for priority updates.
        probability: its probability of being selected at sample time (float64).
        table_size: the number of items in the table at sample time (int64).
        priority: its priority at sample time (float64).
        times_sampled: how often it has been sampled, this time included (int32).
    """

    key: Any
    probability: Any
    table_size: Any
    priority: Any
    times_sampled: Any

    @classmethod
    def zeros(cls) -> SampleInfo:
        """A SampleInfo of Python zeros (``0, 0.0, 0, 0.0, 0``)."""
        return cls(0, 0.0, 0, 0.0, 0)

    @classmethod
    def np_dtypes(cls) -> SampleInfo:
        """The numpy dtypes of the fields: uint64, float64, int64, float64, int32."""
        return cls(np.uint64, np.float64, np.int64, np.float64, np.int32)

    @classmethod
    def tf_dtypes(cls) -> SampleInfo:
        """The TensorFlow dtypes of the fields (needs TensorFlow)."""
        import tensorflow as tf

        return cls(tf.uint64, tf.double, tf.int64, tf.double, tf.int32)


class ReplaySample(NamedTuple):
    """One sampled item: ``info`` (:class:`SampleInfo`) and ``data`` (the table
    signature's nest when unpacked, else the flat list of column arrays)."""

    info: SampleInfo
    data: Sequence[np.ndarray] | Any


__all__ = ["ReplaySample", "SampleInfo"]
