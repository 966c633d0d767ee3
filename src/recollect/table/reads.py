"""Drawing windows from a :class:`~recollect.table.Table`: the read side of the table.

:meth:`TableReads.draw` selects ``batch_size`` valid windows under the table lock
(with the rate limiter's wait, ``max_times_sampled`` counts and removals) and returns a
:class:`~recollect.table.Draw`; :meth:`TableReads.is_stale` tells a reader whether a
write overwrote a drawn step while it gathered outside the lock.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

import recollect.ids as id_layout
from recollect.arguments import positive_int
from recollect.errors import NotEnoughDataError
from recollect.table.draw import Draw
from recollect.table.selection import select_items

if TYPE_CHECKING:
    from recollect.samplers.base import Sampler
    from recollect.table.gate import Gate
    from recollect.table.rate_limiters import RateLimiter
    from recollect.windows import WindowIndex

__all__ = ["TableReads"]


class TableReads:
    """``draw``, ``can_sample``, ``make_draw``, ``is_stale`` and the draw's bookkeeping of
    :class:`~recollect.table.Table` (a mixin; the caller of a ``_`` method holds ``lock``)."""

    lock: threading.RLock
    cond: threading.Condition
    waiters: int
    rate_limiter: RateLimiter | None
    gate: Gate
    index: WindowIndex
    sampler: Sampler
    rng: np.random.Generator
    samples: int
    shard: int
    num_envs: int
    max_length: int
    episode_aware: bool
    max_times_sampled: int
    track_times_sampled: bool
    times_sampled: np.ndarray
    _per_item: bool
    _draw_weight: float
    _ones: dict[int, np.ndarray]

    if TYPE_CHECKING:  # defined by Table

        def resolve_window(
            self, num_steps: int | None, within_episode: bool | None = None
        ) -> tuple[int, bool]: ...

    @property
    def num_stored(self) -> int:
        """Steps stored over all rows."""
        return self.index.num_stored

    @property
    def read_only_draws(self) -> bool:
        """Whether a draw leaves what later draws and writes see as it was: no times-sampled
        counts (``max_times_sampled``'s removals) and no rate limiter that counts samples (a
        :class:`~recollect.MinSize` only waits for a size), so a reader may draw ahead and
        drop the draw unused. The ``samples`` counter counts every draw all the same."""
        limiter = self.rate_limiter
        return not self.track_times_sampled and (limiter is None or not limiter.counts_samples)

    def can_sample(self, batch_size: int = 1, num_steps: int | None = None) -> bool:
        """Whether :meth:`draw` of ``batch_size`` windows of ``num_steps`` would succeed now.

        Raises:
            InvalidArgumentError: as :meth:`resolve_window`.
        """
        positive_int("batch_size", batch_size)
        n, within = self.resolve_window(num_steps)
        with self.lock:
            return self.index.count(n, within) > 0

    def draw(
        self,
        batch_size: int,
        num_steps: int | None = None,
        *,
        within_episode: bool | None = None,
        time_axis: bool | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> Draw:
        """Draws ``batch_size`` valid windows (with replacement) under the table lock.

        Args:
            batch_size: windows to draw, >= 1.
            num_steps: window length (None: the fixed ``sequence_length``, or 1).
            within_episode: override of episode-aware mode.
            time_axis: whether gathered leaves keep a time axis (default: when
                ``num_steps`` was given or windows are longer than one step).
            timeout: with a rate limiter, seconds to wait while it forbids the draw
                (None: forever, 0: never); ignored without one.
            **options: passed to the sampler (e.g. ``importance_sampling_exponent``).

        Returns:
            :class:`~recollect.table.Draw`.

        Raises:
            InvalidArgumentError: bad arguments (see :meth:`resolve_window`), or a
                batch the rate limiter can never allow.
            NotEnoughDataError: no valid window of that length is stored (no rate limiter).
            RateLimiterTimeout: the rate limiter still forbids the draw after ``timeout``.
            StateError: the table was closed while the draw waited.
        """
        batch_size = positive_int("batch_size", batch_size)
        n, within = self.resolve_window(num_steps, within_episode)
        if time_axis is None:
            time_axis = num_steps is not None or n > 1
        with self.lock:
            if self.rate_limiter is not None:
                self.gate.await_sample(batch_size, n, within, timeout)
            elif self.index.count(n, within) == 0:
                raise self.not_enough_data(n, within)
            if self._per_item:  # Reverb's one selection per item (table.selection)
                return self._draw_items(batch_size, n, within, bool(time_axis), options)
            w = self.sampler.sample(batch_size, n, within, self.rng, **options)
            self.samples += batch_size
            times_sampled = None
            if self.track_times_sampled:
                times_sampled = self._count_samples(
                    w.times % self.max_length * self.num_envs + w.rows
                )
                if self.max_times_sampled:
                    self._remove_spent(w.rows, w.times, times_sampled)
            if self.waiters:
                self.cond.notify_all()
            generation = self.index.generation
        return self._draw_of(w, times_sampled, batch_size, n, bool(time_axis), generation)

    def _draw_items(
        self, batch_size: int, n: int, within: bool, time_axis: bool, options: dict[str, Any]
    ) -> Draw:
        """:meth:`draw` for deterministic samplers and ``max_times_sampled`` (the lock held)."""
        # the weight the batch was drawn with, before its removals (see draw_weight)
        self._draw_weight = self.sampler.sampling_weight(n, within)[0]
        w, times_sampled = select_items(self, batch_size, n, within, options)
        self.samples += batch_size
        if self.waiters:
            self.cond.notify_all()
        return self._draw_of(w, times_sampled, batch_size, n, time_axis, self.index.generation)

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
        if ids is None:
            ids = id_layout.encode(w.rows, w.times, self.shard)
        elif self.shard:
            ids = ids | self.shard << id_layout.SHARD_SHIFT
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
        """The table's sampling weight (:meth:`sampling_weight`) at ``draw``, the last draw:
        before the removals of ``max_times_sampled``, which a shard's weight after the draw
        would miss (the client turns local probabilities into global ones with it)."""
        with self.lock:
            if self._per_item:
                return self._draw_weight
            return self.sampler.sampling_weight(draw.num_steps, self.episode_aware)[0]

    def make_draw(
        self,
        rows: np.ndarray,
        times: np.ndarray,
        probabilities: np.ndarray,
        num_steps: int,
        time_axis: bool = True,
    ) -> Draw:
        """A :class:`Draw` of windows chosen by the caller (e.g. enumerated from ``index``).

        It records no sample (``times_sampled`` stays as is) and counts as
        written before any write, so :meth:`is_stale` checks its steps.
        """
        rows, times = np.asarray(rows, np.int64), np.asarray(times, np.int64)
        return Draw(
            rows=rows,
            times=times,
            ids=id_layout.encode(rows, times, self.shard),
            probabilities=np.asarray(probabilities, np.float64),
            table_size=self.index.count(num_steps, self.episode_aware),
            priorities=np.ones(len(rows)),
            times_sampled=self.times_sampled[times % self.max_length * self.num_envs + rows]
            if self.track_times_sampled
            else None,
            weights=None,
            num_steps=num_steps,
            time_axis=time_axis,
            generation=-1,
        )

    def _remove_spent(self, rows: np.ndarray, times: np.ndarray, counts: np.ndarray) -> None:
        """Removes the drawn windows sampled ``max_times_sampled`` times (index and sampler)."""
        spent = counts >= self.max_times_sampled
        if spent.any():
            rows, times = rows[spent], times[spent]
            self.index.remove(rows, times)
            self.sampler.on_remove(rows, times)

    def _unit(self, batch_size: int) -> np.ndarray:
        """A read-only float64 ``[batch_size]`` of ones (the priority of unprioritized windows)."""
        ones = self._ones.get(batch_size)
        if ones is None:
            ones = self._ones[batch_size] = np.ones(batch_size)
            ones.flags.writeable = False
        return ones

    def _count_samples(self, keys: np.ndarray) -> np.ndarray:
        """Adds one to each drawn window's count; returns each draw's count in draw order
        (a window drawn twice in one batch reads ``c + 1`` then ``c + 2``, as one at a time)."""
        counted, n = self.times_sampled, len(keys)
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

    def is_stale(self, draw: Draw) -> bool:
        """Whether a write or ``clear`` since ``draw`` removed one of its steps.

        Cheap when nothing was written since (one integer compare).
        """
        with self.lock:
            if self.index.generation == draw.generation:
                return False
            return self.index.stale(draw.rows, draw.times)

    def not_enough_data(self, n: int, within_episode: bool) -> NotEnoughDataError:
        """The error for a table without a valid window of ``n`` steps."""
        stored = self.index.stored
        if int(stored.max()) == 0:
            return NotEnoughDataError(
                "cannot sample from an empty buffer; add steps first (or wait for the collector)."
            )
        most = int(stored.max())
        if within_episode:
            longest = self.index.longest_run()
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
