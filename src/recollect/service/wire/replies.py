"""What a shard sends back to a client, and what a client sends along with a request.

:class:`ShardDescription` (once per table), :class:`SampledBatches` (each sample
request) and :data:`PriorityUpdates` (held-back priority updates that go along
with a request); :mod:`recollect.service.shard` uses and re-exports them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import optree

from recollect.buffers import Sample

__all__ = ["PriorityUpdates", "SampledBatches", "ShardDescription", "concatenate_samples"]

#: ``(ids, priorities)`` or ``(ids, priorities, counts)``: int64 and float64 ``[U]``
#: priority updates sent along with a request; ``counts``, int64 ``[C]``, the lengths of
#: the ``update_priorities`` calls they concatenate (each applied on its own if the whole fails)
PriorityUpdates = tuple[np.ndarray, ...]


@dataclasses.dataclass(frozen=True)
class SampledBatches:
    """What :meth:`Shard.sample_batches` returns: batches drawn one after another.

    Attributes:
        sample: the windows of every batch drawn, batch after batch, as one
            :class:`~recollect.Sample` (``table_size`` of the last draw), or
            None when no window was drawn.
        weights: float64 ``[drawn]`` the shard's sampling weight at each
            batch's draw (NaN where the batch had no window on this shard).
        table_sizes: ``[drawn]`` the shard's ``table_size`` at each batch's draw.
        error: the exception that stopped the request before its last batch, or None.
    """

    sample: Sample | None
    weights: np.ndarray
    table_sizes: np.ndarray
    error: BaseException | None = None


def concatenate_samples(samples: list[Sample]) -> Sample | None:
    """One :class:`~recollect.Sample` of the rows of ``samples``, in order (None: none),
    with the last one's ``table_size`` and no importance ``weights`` (they are per batch)."""
    if not samples:
        return None
    if len(samples) == 1:
        return samples[0]

    def cat(values: list[Any]) -> np.ndarray | None:
        return None if values[0] is None else np.concatenate(values)

    return Sample(
        optree.tree_map(lambda *xs: np.concatenate(xs), *[s.data for s in samples]),
        np.concatenate([s.ids for s in samples]),
        np.concatenate([s.probabilities for s in samples]),
        None,
        cat([s.priorities for s in samples]),
        cat([s.times_sampled for s in samples]),
        samples[-1].table_size,
    )


@dataclasses.dataclass(frozen=True)
class ShardDescription:
    """What a client needs to know of a shard (sent once, at connection).

    Attributes:
        table: table name.
        shard: shard index (encoded in the ids).
        data_spec: the table's spec (a nest of :class:`~recollect.ArraySpec`).
        num_envs: rows of this shard.
        sequence_length: fixed window length, or None.
        sampler: the sampler's registered name.
        importance_sampling_exponent: beta of prioritized sampling, else None.
        rate_limited: whether the shard has a rate limiter.
        priorities: whether the sampler has priorities (``update_priorities``).
    """

    table: str
    shard: int
    data_spec: Any
    num_envs: int
    sequence_length: int | None
    sampler: str
    importance_sampling_exponent: float | None
    rate_limited: bool
    priorities: bool = False
