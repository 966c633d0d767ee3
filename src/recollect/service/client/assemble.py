"""Batch splitting over shards and reassembly of the shards' draws (exact sampling).

A batch is split over shards by one multinomial draw with the shards' sampling
weights (:func:`split_batches`); each shard draws its part; :func:`assemble`
turns local probabilities into global ones (``p_global = p_local * W_s / W``)
and computes importance weights from them and the summed ``table_size``
(Schaul et al. 2016; Reverb's ``SampleInfo`` carries the same two numbers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optree

from recollect.buffers import Sample
from recollect.samplers import importance_weights
from recollect.service.client.calls import gather
from recollect.service.client.routing import tag_ids
from recollect.service.client.weighting import global_min_probability
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint
from recollect.service.wire.replies import (
    PriorityUpdates,
    SampledBatches,
    ShardDescription,
    concatenate_samples,
)
from recollect.table import TableInfo

__all__ = [
    "assemble",
    "draw_over_shards",
    "importance_exponent",
    "merge_infos",
    "split_batches",
]


def importance_exponent(description: ShardDescription, options: dict[str, Any]) -> float | None:
    """The beta of a request's importance weights: its ``importance_sampling_exponent``
    option, else the table's (None: the table has no priorities)."""
    beta = description.importance_sampling_exponent  # None: no priorities
    if beta is not None and options.get("importance_sampling_exponent") is not None:
        beta = options["importance_sampling_exponent"]
    return beta


def split_batches(
    rng: np.random.Generator, batch_size: int, num_batches: int, weight: np.ndarray
) -> np.ndarray:
    """int64 ``[num_batches, S]``: windows of batch ``i`` to draw on shard ``s``, one
    multinomial draw per batch with the shards' float64 ``weight`` ``[S]``; with no
    weight anywhere, one shard picked at random answers (waits on its limiter, or raises)."""
    total = float(weight.sum())
    if total > 0:
        return rng.multinomial(batch_size, weight / total, size=num_batches)
    counts = np.zeros((num_batches, len(weight)), np.int64)
    counts[:, rng.integers(len(weight))] = batch_size
    return counts


def draw_over_shards(
    endpoints: Sequence[Endpoint],
    sizes: list[int],
    request: rq.SampleBatches,
    updates: Callable[[int], PriorityUpdates | None],
    split: Callable[[np.ndarray], np.ndarray],
    wait: float | None,
    buffer_normalized: bool = False,
) -> tuple[np.ndarray, np.ndarray, list[SampledBatches], np.ndarray | None]:
    """Draws batches of ``sizes`` windows (all one size) over the shards of ``endpoints``.

    One shard draws them all in one request. Over several, each shard is asked
    for its sampling weight, ``split`` (:func:`split_batches`) gives the windows
    of each batch per shard, and each shard with any draws them in one request.

    Args:
        request: the request's other arguments (``sizes`` and ``updates`` are set
            per shard); updates: the held-back priority updates of shard ``s``
            (sent along); wait: seconds to wait for each answer (None: forever);
            buffer_normalized: the table's importance weights are normalised
            buffer-wide, so each shard also reports its smallest sampling value
            (``sampling_bounds``: ``queried`` is then ``[S, 3]``).

    Returns:
        ``(counts, parts, results, queried)``, the arguments of :func:`assemble`.
    """
    k = len(sizes)
    if len(endpoints) == 1:
        endpoint = endpoints[0]
        ask = dataclasses.replace(request, sizes=sizes, updates=updates(0))
        drawn = endpoint.result(endpoint.send(ask), wait)
        return np.full((k, 1), sizes[0], np.int64), np.zeros(1, np.int64), [drawn], None
    ask_weight = rq.SamplingBounds if buffer_normalized else rq.SamplingWeight
    handles = [e.send(ask_weight(request.num_steps, updates(s))) for s, e in enumerate(endpoints)]
    queried = np.array([gather(endpoints, handles, wait)], np.float64)
    queried = queried.reshape(len(endpoints), -1)
    counts = split(queried[:, 0])  # counts[i, s]: windows of batch i drawn on shard s
    parts = np.flatnonzero(counts.any(axis=0))
    handles = [
        endpoints[s].send(
            dataclasses.replace(request, sizes=counts[:, s].tolist(), updates=updates(s))
        )
        for s in parts.tolist()
    ]
    results = gather([endpoints[s] for s in parts.tolist()], handles, wait)
    return counts, parts, results, queried


def assemble(
    counts: np.ndarray,
    parts: np.ndarray,
    results: list[SampledBatches],
    queried: np.ndarray | None,
    beta: float | None,
    base: int,
    shard_bounds: Callable[[int], np.ndarray] | None = None,
) -> list[Sample]:
    """Batches from the shards' draws, vectorized over batches and shards.

    Args:
        counts: int ``[k, S]`` windows of batch ``i`` drawn on shard ``s``.
        parts: int ``[P]`` the shards asked (those with any window).
        results: the :class:`SampledBatches` of each shard of ``parts``.
        queried: float64 ``[S, 2]`` ``(weight, table_size)`` each shard
            reported before the split (None for one shard).
        beta: the importance-sampling exponent (None: no importance weights).
        base: the table's first shard number (:func:`~recollect.service.client.routing.tag_ids`).
        shard_bounds: for tables whose importance weights are normalised
            buffer-wide (``Prioritized(weight_normalization="buffer")``): shard
            ``s``'s ``(weight, table_size, smallest sampling value)``, asked when
            one shard drew several batches; None: per-batch normalisation.

    Global probability of a window drawn on shard ``s`` in batch ``i``:
    ``p_local * W[i, s] / sum_s W[i, s]``, with ``W[i, s]`` the weight shard
    ``s`` drew batch ``i`` with (the queried one where it drew nothing).
    """
    n = min(len(r.weights) for r in results)  # batches every shard drew
    counts = counts[:n]
    num_shards = counts.shape[1]
    bounds = queried
    if queried is None:
        queried = np.ones((num_shards, 2))
    weight = np.broadcast_to(queried[:, 0], (n, num_shards)).copy()
    sizes = np.broadcast_to(queried[:, 1], (n, num_shards)).copy()
    for s, r in zip(parts, results, strict=True):
        drew = ~np.isnan(r.weights[:n])
        weight[drew, s] = r.weights[:n][drew]
        sizes[drew, s] = r.table_sizes[:n][drew]
    share = weight / weight.sum(axis=1, keepdims=True)  # [n, S]
    table_sizes = sizes.sum(axis=1).astype(np.int64)
    if len(results) == 1:
        rows, order = results[0].sample, None
        factor = np.repeat(share[:, parts[0]], counts[:, parts[0]])
    else:  # rows of batch i, shard after shard, out of the shards' samples concatenated
        local = counts[:, parts]  # [n, P]
        lengths = local.ravel()
        first = np.cumsum([0] + [len(r.sample.ids) if r.sample else 0 for r in results])
        starts = (first[:-1] + np.cumsum(local, axis=0) - local).ravel()
        offsets = np.cumsum(lengths) - lengths
        order = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))
        rows = concatenate_samples([r.sample for r in results if r.sample is not None])
        factor = np.repeat(share[:, parts].ravel(), lengths)

    assert rows is not None  # every request draws at least one window
    got: Sample = rows

    def take(a: np.ndarray) -> np.ndarray:
        return a[: len(factor)] if order is None else a[order]

    def take_some(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else take(a)

    data = optree.tree_map(take, got.data)
    ids, priorities, times_sampled = (
        take(got.ids),
        take_some(got.priorities),
        take_some(got.times_sampled),
    )
    ids = tag_ids(ids, base)  # the table's tag: its shards' numbers among all tables'
    probabilities = take(got.probabilities) * factor
    local_weights, min_probability = None, None
    if beta is not None and shard_bounds is not None:  # buffer-wide: (N P_min)^-beta
        if bounds is None and got.weights is not None:  # one shard: its weights are global
            local_weights = take(got.weights)
        else:
            if bounds is None:  # one shard, several draws: ask for its P_min numerator
                bounds = np.array([shard_bounds(int(parts[0]))], np.float64)
            min_probability = global_min_probability(bounds, weight, parts)
    out = []
    b = int(counts[0].sum())
    for i in range(n):
        part = slice(i * b, (i + 1) * b)
        p = probabilities[part]
        if local_weights is not None:
            weights = local_weights[part]
        elif beta is not None:
            p_min = None if min_probability is None else min_probability[i]
            weights = importance_weights(p, table_sizes[i], beta, p_min)
        else:
            weights = None
        out.append(
            Sample(
                optree.tree_map(lambda leaf, part=part: leaf[part], data),
                ids[part],
                p,
                weights,
                None if priorities is None else priorities[part],
                None if times_sampled is None else times_sampled[part],
                int(table_sizes[i]),
            )
        )
    return out


def merge_infos(infos: list[TableInfo]) -> TableInfo:
    """One :class:`TableInfo` of a table from its shards' (sums; the shards in ``shards``)."""
    if len(infos) == 1:
        return infos[0]
    first = infos[0]

    def total(name: str) -> Any:
        return sum(getattr(i, name) for i in infos)

    inserts, samples = total("inserts"), total("samples")
    return TableInfo(
        size=total("size"),
        capacity=total("capacity"),
        num_stored=total("num_stored"),
        num_episodes=total("num_episodes"),
        inserts=inserts,
        samples=samples,
        deletes=total("deletes"),
        samples_per_insert=samples / inserts if inserts else 0.0,
        max_times_sampled=first.max_times_sampled,
        rate_limiter=first.rate_limiter,
        insert_blocked_s=total("insert_blocked_s"),
        sample_blocked_s=total("sample_blocked_s"),
        sampler=first.sampler,
        lost_steps=total("lost_steps"),
        leased_rows=total("leased_rows"),
        shards=tuple(infos),
    )
