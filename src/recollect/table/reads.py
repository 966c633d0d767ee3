"""Drawing windows from a :class:`~recollect.table.Table`: the read side of the table.

:class:`TableReader` (``table.reads``) selects ``batch_size`` valid windows under the
table lock (with the rate limiter's wait, ``max_times_sampled`` counts and removals) and
returns a :class:`~recollect.table.Draw`; :meth:`Table.draw <recollect.table.Table.draw>`
and its companions delegate to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import recollect.ids as id_layout
from recollect.arguments import positive_int
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.table.draw import Draw
from recollect.table.selection import select_items

__all__ = ["TableReader", "count_samples"]


class TableReader:
    """The draw side of one :class:`~recollect.table.Table` (``table.reads``): ``draw``,
    ``make_draw``, ``draw_weight`` and the draw's bookkeeping (times-sampled counts,
    ``max_times_sampled`` removals). Reads and updates the table's index, sampler, RNG and
    counters; the caller of a ``_`` method holds ``table.lock``. ``table`` is typed
    ``Any``, as the :class:`~recollect.table.gate.Gate`'s is: the table module imports this
    one, not the other way round (no import cycle).
    """

    def __init__(self, table: Any) -> None:
        self.table = table
        #: the weight of the last per-item draw, before its removals (see draw_weight)
        self._draw_weight = 0.0
        self._ones: dict[int, np.ndarray] = {}

    def resolve_window(
        self, num_steps: int | None, within_episode: bool | None = None
    ) -> tuple[int, bool]:
        """``(steps per window, episode-aware)`` of a request, validated.

        ``num_steps=None`` means the fixed ``sequence_length`` (or 1).

        Raises:
            InvalidArgumentError: ``num_steps`` < 1 or > ``max_length``, other
                than the sampler's fixed length, or ``within_episode=True``
                on a table that is not episode-aware.
        """
        t = self.table
        if num_steps is None:
            n = t.sequence_length or 1
        else:
            n = positive_int("num_steps", num_steps)
            t.check_num_steps(n)
            fixed = t.sampler.sequence_length
            if fixed is not None and n != fixed:
                raise InvalidArgumentError(
                    f"this buffer's sampler scores windows of sequence_length={fixed}; got "
                    f"num_steps={n}. Sample with num_steps={fixed} or None."
                )
        if within_episode is None:
            within_episode = t.episode_aware
        elif within_episode and not t.episode_aware:
            raise InvalidArgumentError(
                "within_episode=True needs episode ends: a top-level bool 'is_last' leaf in "
                "data_spec, or the buffer's episode_end=(path, value) (e.g. ('step_type', 2)); "
                f"this spec has leaves {t.leaf_paths}."
            )
        return n, bool(within_episode)

    def draw(
        self,
        batch_size: int,
        num_steps: int | None,
        within_episode: bool | None,
        time_axis: bool | None,
        timeout: float | None,
        options: dict[str, Any],
    ) -> Draw:
        """:meth:`Table.draw <recollect.table.Table.draw>` (``options``: the sampler's)."""
        t = self.table
        batch_size = positive_int("batch_size", batch_size)
        n, within = self.resolve_window(num_steps, within_episode)
        if time_axis is None:
            time_axis = num_steps is not None or n > 1
        with t.lock:
            if t.rate_limiter is not None:
                t.gate.await_sample(batch_size, n, within, timeout)
            elif t.index.count(n, within) == 0:
                raise self.not_enough_data(n, within)
            if t.per_item:  # Reverb's one selection per item (table.selection)
                return self._draw_items(batch_size, n, within, bool(time_axis), options)
            w = t.sampler.sample(batch_size, n, within, t.rng, **options)
            t.samples += batch_size
            times_sampled = None
            if t.track_times_sampled:
                times_sampled = count_samples(
                    t.times_sampled, w.times % t.max_length * t.num_envs + w.rows
                )
                if t.max_times_sampled:
                    self._remove_spent(w.rows, w.times, times_sampled)
            if t.waiters:
                t.cond.notify_all()
            generation = t.index.generation
        return self._draw_of(w, times_sampled, batch_size, n, bool(time_axis), generation)

    def _draw_items(
        self, batch_size: int, n: int, within: bool, time_axis: bool, options: dict[str, Any]
    ) -> Draw:
        """:meth:`draw` for deterministic samplers and ``max_times_sampled`` (the lock held)."""
        t = self.table
        # the weight the batch was drawn with, before its removals (see draw_weight)
        self._draw_weight = t.sampler.sampling_weight(n, within)[0]
        w, times_sampled = select_items(t, batch_size, n, within, options)
        t.samples += batch_size
        if t.waiters:
            t.cond.notify_all()
        return self._draw_of(w, times_sampled, batch_size, n, time_axis, t.index.generation)

    def _draw_of(
        self,
        w: Any,
        times_sampled: np.ndarray | None,
        batch_size: int,
        n: int,
        time_axis: bool,
        generation: int,
    ) -> Draw:
        """The :class:`Draw` of selected windows ``w`` (their rows, times, probabilities,
        table size, priorities and weights)."""
        priorities = w.priorities if w.priorities is not None else self._unit(batch_size)
        ids = w.ids
        shard = self.table.shard
        if ids is None:
            ids = id_layout.encode(w.rows, w.times, shard)
        elif shard:
            ids = ids | shard << id_layout.SHARD_SHIFT
        return Draw(
            rows=w.rows,
            times=w.times,
            ids=ids,
            probabilities=w.probabilities,
            table_size=int(w.table_size),
            priorities=priorities,
            times_sampled=times_sampled,
            weights=w.weights,
            num_steps=n,
            time_axis=time_axis,
            generation=generation,
        )

    def draw_weight(self, draw: Draw) -> float:
        """:meth:`Table.draw_weight <recollect.table.Table.draw_weight>`."""
        t = self.table
        with t.lock:
            if t.per_item:
                return self._draw_weight
            return t.sampler.sampling_weight(draw.num_steps, t.episode_aware)[0]

    def make_draw(
        self,
        rows: np.ndarray,
        times: np.ndarray,
        probabilities: np.ndarray,
        num_steps: int,
        time_axis: bool = True,
    ) -> Draw:
        """:meth:`Table.make_draw <recollect.table.Table.make_draw>`."""
        t = self.table
        rows, times = np.asarray(rows, np.int64), np.asarray(times, np.int64)
        return Draw(
            rows=rows,
            times=times,
            ids=id_layout.encode(rows, times, t.shard),
            probabilities=np.asarray(probabilities, np.float64),
            table_size=t.index.count(num_steps, t.episode_aware),
            priorities=np.ones(len(rows)),
            times_sampled=t.times_sampled[times % t.max_length * t.num_envs + rows]
            if t.track_times_sampled
            else None,
            weights=None,
            num_steps=num_steps,
            time_axis=time_axis,
            generation=-1,
        )

    def _remove_spent(self, rows: np.ndarray, times: np.ndarray, counts: np.ndarray) -> None:
        """Removes the drawn windows sampled ``max_times_sampled`` times (index and sampler)."""
        t = self.table
        spent = counts >= t.max_times_sampled
        if spent.any():
            rows, times = rows[spent], times[spent]
            t.index.remove(rows, times)
            t.sampler.on_remove(rows, times)

    def _unit(self, batch_size: int) -> np.ndarray:
        """A read-only float64 ``[batch_size]`` of ones (the priority of unprioritized windows)."""
        ones = self._ones.get(batch_size)
        if ones is None:
            ones = self._ones[batch_size] = np.ones(batch_size)
            ones.flags.writeable = False
        return ones

    def not_enough_data(self, n: int, within_episode: bool) -> NotEnoughDataError:
        """The error for a table without a valid window of ``n`` steps."""
        index = self.table.index
        stored = index.stored
        if int(stored.max()) == 0:
            return NotEnoughDataError(
                "cannot sample from an empty buffer; add steps first (or wait for the collector)."
            )
        most = int(stored.max())
        if within_episode:
            longest = index.longest_run()
            return NotEnoughDataError(
                f"no valid window of num_steps={n}: rows hold up to {most} steps each and the "
                f"longest stored episode part has {longest} steps. Add more steps or sample "
                "shorter windows."
            )
        if most >= n:  # long enough rows, but their windows were deleted or sampled out
            return NotEnoughDataError(
                f"no window of num_steps={n} is left to sample: every stored window was deleted "
                "or reached max_times_sampled. Add more steps."
            )
        return NotEnoughDataError(
            f"no valid window of num_steps={n}: rows hold up to {most} steps each. Add at "
            f"least {n - most} more step(s) per row or sample shorter windows."
        )


def count_samples(counted: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Adds one to each drawn window's count in ``counted`` (int32, by key); returns each
    draw's count in draw order (a window drawn twice in one batch reads ``c + 1`` then
    ``c + 2``, as one at a time)."""
    n = len(keys)
    # one SIMD sort of (key, draw position) pairs packed in an int64 (keys < 2**40, n < 2**23)
    packed = np.sort(keys * n + np.arange(n))
    ranked = packed // n
    order = packed - ranked * n
    first = np.empty(n, bool)
    first[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
    if first.all():  # no window twice (the common case): one gather, one scatter
        counts = counted[keys] + 1
        counted[keys] = counts
        return counts
    starts = np.flatnonzero(first)
    group = np.cumsum(first) - 1  # the unique key of each sorted position
    unique = ranked[starts]
    before = counted[unique]
    counted[unique] = before + np.bincount(group)
    counts = np.empty(n, np.int32)
    counts[order] = before[group] + (np.arange(n) - starts[group]) + 1
    return counts
