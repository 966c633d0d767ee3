"""Reverb's per-item selection: each window of a batch is one selection.

In Reverb a batch of ``b`` is ``b`` selections one after another, and a window
that reaches ``max_times_sampled`` is removed before the next selection of the
same batch. Two consequences a table follows here:

* Deterministic samplers (Fifo, Lifo, MinHeap, MaxHeap) return their first
  window ``b`` times (Fifo ``sample(3)``: ``[0, 0, 0]``); with
  ``max_times_sampled=k`` the first window ``k - times_sampled`` times, then
  the next one (Fifo, ``k=2``: ``[0, 0, 1]``). Computed at once from the first
  ``min(b, N)`` windows of the order and their counts: O(b log N) for heaps.
* Random samplers (Uniform, Prioritized) with ``max_times_sampled``: a window
  is drawn at most ``k - times_sampled`` times in a batch, and after its last
  allowed draw the next items are drawn among the others (``k=1`` is sampling
  without replacement). Done in rounds: each round draws the items still
  missing from the current state, keeps the prefix up to the first item that
  would be the draw of an already removed window, applies those draws
  (counts, removals) and draws the rest again. Draws after a kept prefix are
  discarded whole, so every kept item has exactly the distribution of a
  sequential selection. A round removes at least one window, and the rounds
  needed are about ``b / sqrt(N)`` for ``k=1`` (a birthday collision ends a round).

Also :func:`delete_windows`, Reverb's ``mutate_priorities(deletes=...)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import recollect.ids as id_layout
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.samplers.base import WindowDraw, importance_weights

__all__ = ["delete_windows", "select_items"]


def running_counts(counted: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Times each drawn window will have been drawn after each draw position, in order
    (``counted[key]`` before, plus its occurrences in ``keys`` up to that position)."""
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    first = np.empty(n, bool)
    first[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1
    counts = np.empty(n, np.int64)
    counts[order] = counted[ranked] + (np.arange(n) - starts[group]) + 1
    return counts


def _allowance(table: Any, n: int, within: bool, needed: int) -> int:
    """Draws the sampleable windows still allow (each ``max_times_sampled - times_sampled``),
    at least ``needed`` when that many windows are sampleable (then not summed)."""
    seg = table.index.segments(n, within)
    if seg.total >= needed:
        return seg.total
    rows, times = seg.enumerate()
    keys = times % table.max_length * table.num_envs + rows
    return int((table.max_times_sampled - table.times_sampled[keys]).sum())


def select_items(
    table: Any, batch_size: int, n: int, within: bool, options: dict[str, Any]
) -> tuple[WindowDraw, np.ndarray | None]:
    """A batch of ``batch_size`` selections, one per item (see the module doc); the caller
    holds the table lock and has checked that a window is sampleable.

    Returns:
        ``(draw, times_sampled)``: the windows and, when the table tracks them, each
        item's times sampled after its selection (int32 ``[B]``), else None.

    Raises:
        NotEnoughDataError: with ``max_times_sampled``, the sampleable windows allow
            fewer than ``batch_size`` draws; nothing is drawn.
    """
    mts = table.max_times_sampled
    if mts and _allowance(table, n, within, batch_size) < batch_size:
        raise NotEnoughDataError(
            f"a batch of {batch_size} needs {batch_size} draws but the sampleable windows "
            f"allow fewer (each at most max_times_sampled={mts} times, counting earlier "
            "draws); add more steps or sample a smaller batch."
        )
    if table.sampler.deterministic:
        return _ordered(table, batch_size, n, within, options)
    return _rounds(table, batch_size, n, within, options)


def _keys(table: Any, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
    return times % table.max_length * table.num_envs + rows


def _ordered(
    table: Any, b: int, n: int, within: bool, options: dict[str, Any]
) -> tuple[WindowDraw, np.ndarray | None]:
    """Deterministic samplers: the first window repeated, or each of the first windows as
    often as ``max_times_sampled`` still allows, in order."""
    mts = table.max_times_sampled
    size = table.index.count(n, within)
    first = table.sampler.sample(min(b, size) if mts else 1, n, within, table.rng, **options)
    keys = _keys(table, first.rows, first.times)
    if mts:
        before = table.times_sampled[keys].astype(np.int64)
        left = mts - before  # >= 1: spent windows are removed
        total = np.cumsum(left)
        m = int(np.searchsorted(total, b)) + 1  # windows the batch reaches
        reps = left[:m].copy()
        reps[-1] -= int(total[m - 1]) - b
    else:
        m, reps = 1, np.array([b])
        before = table.times_sampled[keys].astype(np.int64) if table.track_times_sampled else None
    pick = np.repeat(np.arange(m), reps)
    draw = WindowDraw(
        first.rows[pick],
        first.times[pick],
        np.ones(b),
        table_size=first.table_size,
        priorities=None if first.priorities is None else first.priorities[pick],
    )
    if before is None:
        return draw, None
    counts = before[pick] + (np.arange(b) - np.repeat(np.cumsum(reps) - reps, reps)) + 1
    after = before[:m] + reps
    table.times_sampled[keys[:m]] = after
    if mts:
        spent = after >= mts
        _remove(table, first.rows[:m][spent], first.times[:m][spent])
    return draw, counts.astype(np.int32)


def _rounds(
    table: Any, b: int, n: int, within: bool, options: dict[str, Any]
) -> tuple[WindowDraw, np.ndarray]:
    """Random samplers with ``max_times_sampled``: rounds of vectorized draws (module doc)."""
    mts, counted = table.max_times_sampled, table.times_sampled
    parts: list[tuple[WindowDraw, int, np.ndarray]] = []
    left = b
    while left:
        w = table.sampler.sample(left, n, within, table.rng, **options)
        keys = _keys(table, w.rows, w.times)
        counts = running_counts(counted, keys)
        over = counts > mts  # the draw of a window removed earlier in this round
        p = int(over.argmax()) if over.any() else left  # >= 1: the first draw is live
        kept = keys[:p]
        np.add.at(counted, kept, 1)
        spent = counts[:p] == mts
        _remove(table, w.rows[:p][spent], w.times[:p][spent])
        parts.append((w, p, counts[:p]))
        left -= p
    return _concatenate(table, parts, options), np.concatenate([c for _, _, c in parts]).astype(
        np.int32
    )


def _concatenate(
    table: Any, parts: list[tuple[WindowDraw, int, np.ndarray]], options: dict[str, Any]
) -> WindowDraw:
    if len(parts) == 1 and parts[0][1] == len(parts[0][0].rows):
        return parts[0][0]

    def join(name: str) -> np.ndarray:
        values = [getattr(w, name) for w, _, _ in parts]
        return np.concatenate([v[:p] for v, (_, p, _) in zip(values, parts, strict=True)])

    def cat(name: str) -> np.ndarray | None:  # a field that may be None
        return None if getattr(parts[0][0], name) is None else join(name)

    probabilities = join("probabilities")
    weights = cat("weights")
    sampler = table.sampler
    if weights is not None and getattr(sampler, "weight_normalization", "batch") == "batch":
        beta = options.get("importance_sampling_exponent")
        beta = getattr(sampler, "importance_sampling_exponent", None) if beta is None else beta
        if beta is not None:  # the batch's largest weight, over every round
            sizes = np.concatenate([np.full(p, w.table_size) for w, p, _ in parts])
            weights = importance_weights(probabilities, sizes, float(beta))
    return WindowDraw(
        join("rows"),
        join("times"),
        probabilities,
        weights,
        parts[0][0].table_size,
        cat("priorities"),
    )


def _remove(table: Any, rows: np.ndarray, times: np.ndarray) -> None:
    if len(rows):
        table.index.remove(rows, times)
        table.sampler.on_remove(rows, times)


def delete_windows(table: Any, ids: Any) -> int:
    """Removes the windows starting at ``ids`` (Reverb: ``mutate_priorities`` deletes);
    the caller holds the table lock.

    An id is deleted when it belongs to this table's shard, its step is still
    stored, a window of the table's ``sequence_length`` (or 1) starts there and
    it was not removed already; other ids are skipped and counted.

    Returns:
        The number of ids skipped (stale, unknown, of another shard, or already
        removed; the repeats of an id deleted by this call count as skipped).

    Raises:
        InvalidArgumentError: ``ids`` is not a 1-D integer array; nothing is deleted.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise InvalidArgumentError(
            f"delete needs 1-D integer ids (Sample.ids); got shape {ids.shape}, dtype {ids.dtype}."
        )
    if not ids.size:
        return 0
    shard, rows, times = id_layout.decode(ids.astype(np.int64, copy=False))
    ok = (shard == table.shard) & (rows >= 0) & (rows < table.num_envs)
    # a valid start of a window of sequence_length: inside one of the index's segments
    seg = table.index.segments(table.sequence_length or 1, table.episode_aware)
    starts = seg.rows * id_layout.MAX_TIME + seg.starts
    keys = np.where(ok, rows, 0) * id_layout.MAX_TIME + times
    if len(starts):
        order = np.argsort(starts)
        at = order[np.maximum(np.searchsorted(starts, keys, side="right", sorter=order) - 1, 0)]
        ok &= (seg.rows[at] == rows) & (times >= seg.starts[at])
        ok &= times < seg.starts[at] + seg.counts[at]
    else:
        ok[:] = False
    _remove(table, rows[ok], times[ok])
    return int(len(ids) - len(np.unique(keys[ok])))  # a repeated id is deleted once
