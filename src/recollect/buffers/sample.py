"""What a sample returns: data and metadata kept apart (Reverb: ``ReplaySample``)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

__all__ = ["BufferInfo", "Sample"]


class BufferInfo(NamedTuple):
    """TF-Agents style sample metadata.

    Attributes:
        ids: int64 ``[B]`` id of each window's first step.
        probabilities: float64 ``[B]`` probability with which each window was drawn.
    """

    ids: np.ndarray
    probabilities: np.ndarray


@dataclasses.dataclass(frozen=True)
class Sample:
    """A batch of windows.

    Attributes:
        data: nest like the spec; leaves ``[B, num_steps, *leaf_shape]``
            (``[B, *leaf_shape]`` when sampled with ``num_steps=None``).
        ids: int64 ``[B]`` id of each window's first step; unique for the
            buffer's lifetime (``recollect.ids.decode(ids)`` gives ``(shard, row, row time)``).
        probabilities: float64 ``[B]`` probability with which each window was drawn.
        weights: float64 ``[B]`` importance weights normalised by their max
            (prioritized sampling), else None; computed from ``probabilities``
            and ``table_size`` (:func:`recollect.samplers.importance_weights`).
        priorities: float64 ``[B]`` priority of each window (1.0 without priorities).
        times_sampled: int32 ``[B]`` times each window was returned, this sample included.
        table_size: number of valid windows the batch was drawn among.
    """

    data: Any
    ids: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None
    priorities: np.ndarray | None = None
    times_sampled: np.ndarray | None = None
    table_size: int = 0

    @property
    def info(self) -> BufferInfo:
        """``BufferInfo(ids, probabilities)`` as TF-Agents returns it."""
        return BufferInfo(self.ids, self.probabilities)
