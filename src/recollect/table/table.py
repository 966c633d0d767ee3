"""Table: the window index and the sampler of one buffer or shard, behind one lock.

A table decides *which* stored windows come back; storage holds the bytes. A
reader draws under the table lock (:meth:`Table.draw`), gathers from storage
outside it, and asks :meth:`Table.is_stale` whether a write overwrote a drawn
step meanwhile (then it draws again). A writer asks for the slots of the next
steps (:meth:`Table.next_steps`), writes storage and records the write
(:meth:`Table.insert`), all under :attr:`Table.lock`.

This module holds the construction, geometry, write and rate-limiting side; the
table holds its collaborators: the draw side :class:`~recollect.table.reads.TableReader`
(``table.reads``) and the rate limiter's waits :class:`~recollect.table.gate.Gate`
(``table.gate``); the checkpoint state and info report are functions of
:mod:`recollect.table.table_state`.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import recollect.ids as id_layout
from recollect.arguments import check_int, positive_int
from recollect.errors import InvalidArgumentError
from recollect.samplers.base import Sampler
from recollect.samplers.uniform import Uniform
from recollect.samplers.windows import WindowIndex
from recollect.table import at_fork, table_state
from recollect.table.draw import Draw
from recollect.table.gate import Gate
from recollect.table.info import TableInfo
from recollect.table.rate_limiters import RateLimiter
from recollect.table.reads import TableReader
from recollect.table.selection import delete_windows

__all__ = ["Table", "positive_int"]

# the episode-end flags of one step of a one-row table (Table.insert_one); read-only
_ENDED, _NOT_ENDED = np.ones(1, np.bool_), np.zeros(1, np.bool_)
_ENDED.flags.writeable = _NOT_ENDED.flags.writeable = False

RngLike = int | np.random.Generator | np.random.SeedSequence | None


class Table:
    """Window index + sampler + RNG of ``num_envs`` rows of ``max_length`` slots.

    Args:
        num_envs: env rows (each with its own clock).
        max_length: slots per row.
        sampler: decides which windows come back (default :class:`Uniform`);
            one instance serves one table.
        sequence_length: fixed window length (prioritized samplers score windows
            of it); ``draw`` then defaults ``num_steps`` to it.
        episode_aware: windows never contain an ``is_last`` step but as their last.
        rng: int seed, ``np.random.Generator``, ``SeedSequence`` or None.
        shard: the table shard encoded in ids (0 for an in-process buffer).
        leaf_paths: the spec's leaf paths, named in error messages.
        track_times_sampled: count how often each window was drawn (``Draw.times_sampled``;
            about 14 us per draw of 256 on the W2 workload, so off unless asked for).
        rate_limiter: a :class:`~recollect.table.rate_limiters.RateLimiter`; inserts
            and draws it forbids wait (see :meth:`await_insert`). None: nothing waits
            and a draw without a valid window raises NotEnoughDataError.
        max_times_sampled: remove a window (its start step becomes unsampleable)
            once it was drawn this many times; 0 keeps windows until overwritten.
            Turns ``track_times_sampled`` on.

    Raises:
        InvalidArgumentError: a sampler already bound to another table, or a
            geometry the id layout cannot hold.
    """

    def __init__(
        self,
        num_envs: int,
        max_length: int,
        *,
        sampler: Sampler | None = None,
        sequence_length: int | None = None,
        episode_aware: bool = False,
        rng: RngLike = None,
        shard: int = 0,
        leaf_paths: tuple[str, ...] | list[str] = (),
        track_times_sampled: bool = False,
        rate_limiter: RateLimiter | None = None,
        max_times_sampled: int = 0,
    ) -> None:
        id_layout.check_geometry(num_envs, shard)
        if rate_limiter is not None and not isinstance(rate_limiter, RateLimiter):
            raise InvalidArgumentError(
                f"`rate_limiter` must be a recollect.RateLimiter (e.g. rc.MinSize(1)) or None; "
                f"got {type(rate_limiter).__name__}."
            )
        max_times_sampled = check_int(
            "max_times_sampled", max_times_sampled, minimum=0, meaning="0: never remove"
        )
        self.rate_limiter = rate_limiter
        self.max_times_sampled = int(max_times_sampled)
        track_times_sampled = track_times_sampled or self.max_times_sampled > 0
        #: steps written, windows drawn since construction (or the last clear); checkpointed
        self.inserts = 0
        self.samples = 0
        #: deletes and priority updates so far (see :attr:`version`)
        self.changes = 0
        self.closed = False
        #: threads waiting on ``cond`` (notified only when some wait)
        self.waiters = 0
        self.leaf_paths = list(leaf_paths)
        self.num_envs = num_envs
        self.max_length = max_length
        self.shard = shard
        self.episode_aware = episode_aware
        if sequence_length is not None:
            sequence_length = positive_int("sequence_length", sequence_length)
            self.check_num_steps(sequence_length, "sequence_length")
        self.sequence_length = sequence_length
        self.rng = np.random.default_rng(rng)
        #: Hold it to make several table and storage calls one atomic step. A forked
        #: child finds it free (see :mod:`recollect.table.at_fork`).
        self.lock = threading.RLock()
        #: Waiters for the rate limiter wait on this condition of ``lock``.
        self.cond = threading.Condition(self.lock)
        at_fork.register(self)
        self.index = WindowIndex(num_envs, max_length)
        self.sampler = sampler if sampler is not None else Uniform()
        self.sampler.bind(self.index, sequence_length, episode_aware=episode_aware)
        # what insert_one tells the sampler of a step that ended no episode: None without is_last
        self._not_ended = _NOT_ENDED if episode_aware else None
        self._sampler_tracks_writes = type(self.sampler).on_add is not Sampler.on_add
        self._sampler_blocks = type(self.sampler).on_add_block is not Sampler.on_add_block
        #: draws select one window per item (Reverb's selection; see table.selection)
        self.per_item = self.max_times_sampled > 0 or self.sampler.deterministic
        # times each window (keyed by its first step) was drawn, time-major: a write to every
        # row clears one contiguous line, a draw reads the counts of slot * num_envs + row
        self.track_times_sampled = bool(track_times_sampled)
        shape = (max_length, num_envs) if self.track_times_sampled else (0, num_envs)
        self._times_sampled = np.zeros(shape, np.int32)
        self.times_sampled = self._times_sampled.reshape(-1)
        self.recheck_clocks()
        #: blocks inserts and draws while the rate limiter forbids them
        self.gate = Gate(self)
        #: draws windows (``draw``, ``make_draw``, ``draw_weight`` delegate to it)
        self.reads = TableReader(self)
        if rate_limiter is not None:
            self.gate.check_limits()

    @property
    def version(self) -> int:
        """Moves with every write, clear, load, episode end, delete or priority update; a
        reader that drew ahead keeps its draw only while this is unchanged (read without
        the lock). A draw's own ``max_times_sampled`` removals leave it as it was."""
        return self.index.generation + self.changes

    def recheck_clocks(self) -> None:
        """Caches whether all rows share one clock (the cheap write path) and its value."""
        self._uniform = self.index.uniform
        self._clock = int(self.index.t[0])

    @property
    def clock(self) -> int:
        """The clock every row shares, the step time of the next write; only while the rows
        share one clock (always with ``num_envs == 1``; see :meth:`next_steps`)."""
        return self._clock

    @property
    def clocks(self) -> np.ndarray:
        """int64 ``[num_envs]``: each row's clock, the step time of its next write (live,
        read-only: copy it to keep it past the lock)."""
        return self.index.t

    @property
    def cleared_before(self) -> np.ndarray:
        """int64 ``[num_envs]``: steps before these times were cleared (live, read-only)."""
        return self.index.t_clear

    @property
    def nbytes(self) -> int:
        """Bytes of the window index, the sampler's arrays and the times-sampled counts
        (:func:`recollect.memory.table_nbytes` of the same arguments)."""
        return self.index.nbytes + self.sampler.nbytes + self._times_sampled.nbytes

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

    # -- reading (TableReader) ----------------------------------------------
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
        return self.reads.draw(batch_size, num_steps, within_episode, time_axis, timeout, options)

    def draw_weight(self, draw: Draw) -> float:
        """The table's sampling weight (:meth:`sampling_weight`) at ``draw``, the last draw:
        before the removals of ``max_times_sampled``, which a shard's weight after the draw
        would miss (the client turns local probabilities into global ones with it)."""
        return self.reads.draw_weight(draw)

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
        return self.reads.make_draw(rows, times, probabilities, num_steps, time_axis)

    def is_stale(self, draw: Draw) -> bool:
        """Whether a write or ``clear`` since ``draw`` removed one of its steps.

        Cheap when nothing was written since (one integer compare).
        """
        with self.lock:
            if self.index.generation == draw.generation:
                return False
            return self.index.stale(draw.rows, draw.times)

    # -- snapshots (table_state) ---------------------------------------------
    def info(self, sampler_config: dict[str, Any] | None = None) -> TableInfo:
        """A :class:`TableInfo` snapshot (``sampler_config``: the sampler's arguments)."""
        return table_state.info(self, sampler_config)

    def state_dict(self) -> dict[str, Any]:
        """Index, sampler state, times sampled (``columns``: one count per slot, a ring
        array ``[num_envs, max_length]``) and RNG state (arrays and JSON values)."""
        return table_state.state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (from a table of the same geometry).

        Raises:
            ValueError: the state does not fit this table.
        """
        table_state.load_state_dict(self, state)

    # -- geometry -----------------------------------------------------------
    def check_num_steps(self, num_steps: int, name: str = "num_steps") -> None:
        """Raises InvalidArgumentError when windows of ``num_steps`` cannot fit a row."""
        if num_steps > self.max_length:
            raise InvalidArgumentError(
                f"`{name}` must be <= max_length (capacity // num_envs); got {name}="
                f"{num_steps}, max_length={self.max_length}. Increase capacity or "
                "shorten the window."
            )

    def resolve_window(
        self, num_steps: int | None, within_episode: bool | None = None
    ) -> tuple[int, bool]:
        """``(steps per window, episode-aware)`` of a request, validated
        (:meth:`TableReader.resolve_window <recollect.table.reads.TableReader.resolve_window>`).
        """
        return self.reads.resolve_window(num_steps, within_episode)

    # -- writing (the caller holds ``lock``) ---------------------------------
    def next_steps(self, rows: np.ndarray | None) -> tuple[Any, Any]:
        """``(times, slots)`` of the next step of ``rows`` (None: every row).

        With every row at one clock, both are Python ints (the cheap common case).
        """
        if rows is None and self._uniform:
            return self._clock, self._clock % self.max_length
        t = self.index.t if rows is None else self.index.t[rows]
        return t, t % self.max_length

    def insert(self, rows: np.ndarray | None, slots: Any, is_last: np.ndarray | None) -> None:
        """Records that the steps at ``next_steps(rows)`` were written (storage first)."""
        if self.track_times_sampled:
            if rows is not None:
                self._times_sampled[slots, rows] = 0
            elif isinstance(slots, np.ndarray):  # rows at their own clocks: one slot each
                self._times_sampled[slots, self.index.all_rows] = 0
            else:
                self._times_sampled[slots] = 0
        if rows is None:
            self.inserts += self.num_envs
        else:
            self._uniform = self._uniform and len(rows) == self.num_envs
            self.inserts += len(rows)
        self._clock += 1
        self.index.advance(rows, is_last)
        if self._sampler_tracks_writes:
            self.sampler.on_add(rows, is_last)
        if self.waiters:
            self.cond.notify_all()

    def insert_one(self, ended: bool) -> None:
        """:meth:`insert` of one step of a one-row table (``num_envs == 1``), its episode end
        as a bool: the single-step ``add`` path, which builds no array. The caller wrote
        storage at ``next_steps(None)[1]`` first and holds ``lock``."""
        if self.track_times_sampled:
            self._times_sampled[self._clock % self.max_length] = 0
        self.inserts += 1
        self._clock += 1
        self.index.advance(None, _ENDED if ended else None)
        if self._sampler_tracks_writes:
            self.sampler.on_add(None, _ENDED if ended else self._not_ended)
        if self.waiters:
            self.cond.notify_all()

    @property
    def block_writes(self) -> bool:
        """Whether :meth:`insert_block` applies: the sampler does not track single writes,
        or it has a block hook (``Sampler.on_add_block``)."""
        return not self._sampler_tracks_writes or self._sampler_blocks

    def insert_block(
        self, rows: np.ndarray | None, slots: np.ndarray, count: int, is_last: np.ndarray | None
    ) -> None:
        """Records ``count`` consecutive steps per row written at ``slots`` ``[k, count]``.

        Only when :attr:`block_writes` holds (the caller checks); the caller holds ``lock``.
        """
        if self.track_times_sampled:
            row_ids = np.arange(self.num_envs) if rows is None else rows
            self._times_sampled[slots, row_ids[:, None]] = 0
        if rows is not None:
            self._uniform = self._uniform and len(rows) == self.num_envs
        self._clock += count
        self.inserts += count * (self.num_envs if rows is None else len(rows))
        self.index.advance_block(rows, count, is_last)
        if self._sampler_tracks_writes:
            self.sampler.on_add_block(rows, count, is_last)
        if self.waiters:
            self.cond.notify_all()

    def clear(self) -> None:
        """Forgets every stored step; clocks (and so ids) keep increasing."""
        with self.lock:
            self.index.clear()
            self.sampler.on_clear()
            self.recheck_clocks()
            self.inserts = self.samples = 0  # as Reverb's reset: the balance starts over
            if self.waiters:
                self.cond.notify_all()

    def end_episodes(self, rows: Any) -> np.ndarray:
        """Ends the episode at the newest stored step of each row of ``rows``, so the
        next step written to it starts a new one (episode-aware tables; a no-op otherwise).

        Returns:
            int64 ``[m]`` the rows whose episode was ended.
        """
        rows = np.unique(np.asarray(rows, np.int64))
        with self.lock:
            if not self.episode_aware or not len(rows):
                return rows[:0]
            ended = self.index.end_episodes(rows)
            if len(ended):
                self.sampler.on_end_episodes(ended)
            return ended

    def sampling_weight(
        self, num_steps: int | None = None, within_episode: bool | None = None
    ) -> tuple[float, int]:
        """``(weight, table_size)`` of windows of ``num_steps``: the table's share of a draw
        split over shards (number of valid windows, or priority sum for prioritized
        sampling; see :meth:`Sampler.sampling_weight <recollect.samplers.Sampler.sampling_weight>`).

        Raises:
            InvalidArgumentError: as :meth:`resolve_window`.
        """
        n, within = self.resolve_window(num_steps, within_episode)
        with self.lock:
            return self.sampler.sampling_weight(n, within)

    def min_sampling_value(self) -> float:
        """The sampler's smallest positive sampling value (``Prioritized.min_sampling_value``;
        NaN for samplers without one)."""
        smallest = getattr(self.sampler, "min_sampling_value", None)
        with self.lock:
            return float("nan") if smallest is None else smallest()

    def close(self) -> None:
        """Wakes every insert and draw waiting on the rate limiter with StateError; later
        calls that would wait raise it at once. Calls the limiter allows still run."""
        with self.lock:
            self.closed = True
            self.cond.notify_all()

    # -- rate limiting (the caller holds ``lock``) -------------------------------
    def size(self, num_steps: int | None = None, within: bool | None = None) -> int:
        """Sampleable windows of ``num_steps`` (default: ``sequence_length`` or 1)."""
        n = num_steps or self.sequence_length or 1
        return self.index.count(n, self.episode_aware if within is None else within)

    def await_insert(self, k: int, timeout: float | None) -> None:
        """Waits until the rate limiter allows an insert of ``k`` steps (no-op without one).

        See :meth:`Gate.await_insert <recollect.table.gate.Gate.await_insert>`.
        """
        limiter = self.rate_limiter
        if limiter is None or limiter.balance_allows_insert(self.inserts, self.samples, k):
            return  # the size is needed only when the balance forbids it (cheap common case)
        self.gate.await_insert(k, timeout)

    # -- changing stored windows ---------------------------------------------
    def delete(self, ids: Any) -> int:
        """Removes the windows starting at ``ids`` (Reverb: ``mutate_priorities`` deletes).

        A deleted window is never drawn again; ``info().size`` drops and ``deletes``
        counts it; a rate limiter sees the smaller size (a delete can let an insert
        through and block a sample, as in Reverb).

        Returns:
            The number of ids skipped: overwritten, not a complete window, of another
            shard, or deleted already.

        Raises:
            InvalidArgumentError: ``ids`` is not 1-D integers; nothing is deleted.
        """
        with self.lock:
            skipped = delete_windows(self, ids)
            self.changes += 1  # moves ``version``: read-ahead drops what it drew before
            if self.waiters:
                self.cond.notify_all()
            return skipped

    @property
    def deletes(self) -> int:
        """Windows removed by ``max_times_sampled`` or :meth:`delete` so far."""
        return self.index.removed

    # -- priorities -----------------------------------------------------------
    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets the priorities of the windows starting at ``ids`` (prioritized samplers).

        Returns:
            The number of ids skipped because their steps were overwritten (or
            belong to another shard).

        Raises:
            InvalidArgumentError: the sampler has no priorities, or bad values.
        """
        update = getattr(self.sampler, "update_priorities", None)
        if update is None:
            raise InvalidArgumentError(
                f"{type(self.sampler).__name__} sampling has no priorities; construct the "
                "buffer with sampler=recollect.Prioritized(...) to use update_priorities."
            )
        with self.lock:
            skipped = update(ids, priorities, shard=self.shard)
            self.changes += 1  # moves ``version``: read-ahead drops what it drew before
            return skipped
