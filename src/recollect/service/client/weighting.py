"""Buffer-wide importance weights of a batch drawn over several shards.

With ``Prioritized(weight_normalization="buffer")`` a weight is
``(N P_i)^-beta / (N P_min)^-beta`` (cpprb, OpenAI baselines): ``P_min`` is
the smallest probability of any stored window of the whole table, the
smallest of the shards' smallest sampling values ``(p + epsilon)^alpha`` (each
shard's exact smallest leaf, ``SumTree.min``) over the sum of the shards' sampling weights.
"""

from __future__ import annotations

import numpy as np

__all__ = ["global_min_probability"]


def global_min_probability(bounds: np.ndarray, weight: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """``P_min`` of each batch.

    Args:
        bounds: float64 ``[S, 3]`` (or ``[1, 3]`` for one shard) each shard's
            ``(weight, table_size, smallest sampling value)`` (``Shard.sampling_bounds``;
            ``inf`` for a shard without a sampleable window).
        weight: float64 ``[k, S]`` the weight each shard drew batch ``i`` with.
        parts: int ``[P]`` the shards that drew (the one shard when ``bounds`` has one row).

    Returns:
        float64 ``[k]``: the smallest value over the shards divided by batch ``i``'s total weight.
    """
    smallest = float(np.min(bounds[:, 2]))
    if len(bounds) == 1:  # one shard: its weight at each draw
        total = weight[:, int(parts[0])]
    else:
        total = weight.sum(axis=1)
    return smallest / total
