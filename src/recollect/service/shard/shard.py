"""Shard, this module's one responsibility: a served table's part plus its writers' row leases.

A table served by a :class:`~recollect.service.Server` or by ``recollect.ray.serve``
is split into shards; each holds ``num_envs / num_shards`` rows and the same share
of the capacity, with the shard index encoded in its ids. Writers lease rows
(:meth:`Shard.reserve`): a row has one writer at a time, so every row keeps one
clock and one episode. A row leased anew ends its stored episode first
(:meth:`Table.end_episodes <recollect.table.Table.end_episodes>`), so the next
writer's first step starts a new episode there.

A lease passes back when its writer releases it, when its process is found dead
on this host, or after ``lease_timeout`` seconds without a write, but only when
a reservation finds too few free rows.

Every method is synchronous and thread-safe (the buffer's lock); the embedded
server calls them directly, a Ray actor wraps them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
import time
from typing import Any

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers import ReplayBuffer, Sample
from recollect.errors import (
    InvalidArgumentError,
    NoFreeRowsError,
    RateLimiterTimeout,
    StateError,
)
from recollect.service.shard.chunks import ChunkCheck
from recollect.service.shard.counters import InsertCounters
from recollect.service.shard.lease import ChunkOrder, Lease
from recollect.service.wire.replies import (
    PriorityUpdates,
    SampledBatches,
    ShardDescription,
    concatenate_samples,
)
from recollect.specs import FlatSpec
from recollect.table import TableInfo

__all__ = ["Shard"]

#: seconds between a waiting sample's checks whether its client was closed
CANCEL_CHECK_S = 0.25
#: seconds a closed client's id is remembered (requests still on their way are refused)
_CANCELLED_FOR_S = 600.0
#: seconds an insert waits at most for the draws queued for the table lock to go first
_YIELD_TO_DRAWS_S = 0.01


class Shard:
    """One shard of a served table.

    Args:
        table: the table's name (in error messages).
        buffer: the shard's :class:`~recollect.ReplayBuffer` (its ``shard`` id set).
        lease_timeout: seconds without a write after which a lease may pass to a
            new writer that finds no free row.
        counters: the shard's :class:`~recollect.service.shard.counters.InsertCounters`,
            memory-mapped next to the checkpoints when the service has a
            ``checkpoint_dir``, so a restarted shard knows how many steps it lost.
    """

    def __init__(
        self,
        table: str,
        buffer: ReplayBuffer,
        *,
        lease_timeout: float = 60.0,
        counters: InsertCounters | None = None,
    ) -> None:
        self.table = table
        self.buffer = buffer
        self.index = buffer.table.shard
        self.lease_timeout = float(lease_timeout)
        self._counters = InsertCounters() if counters is None else counters
        self._owner = np.zeros(buffer.num_envs, np.int64)  # lease id of each row, 0: free
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._cancelled: dict[int, float] = {}  # closed clients' ids -> time.monotonic()
        # draws waiting for the table lock; inserts let them go first (see _draws_first)
        self._draws_waiting = 0
        self._draws_done = threading.Condition(threading.Lock())
        # a chunk waits this long for the one before it (see extend's ``seq``)
        self._order = ChunkOrder(table, self.index, max(self.lease_timeout, 1.0))
        self._check_chunk = ChunkCheck(FlatSpec(buffer.data_spec), table, self.index)

    # -- description --------------------------------------------------------
    def describe(self) -> ShardDescription:
        """The :class:`ShardDescription` of this shard."""
        buf = self.buffer
        return ShardDescription(
            table=self.table,
            shard=self.index,
            data_spec=buf.data_spec,
            num_envs=buf.num_envs,
            sequence_length=buf.reader.sequence_length,
            sampler=buf.reader.sampler.name,
            importance_sampling_exponent=getattr(
                buf.reader.sampler, "importance_sampling_exponent", None
            ),
            rate_limited=buf.table.rate_limiter is not None,
            priorities=hasattr(buf.reader.sampler, "update_priorities"),
        )

    # -- leases ---------------------------------------------------------------
    def reserve(self, num_envs: int, host: str, pid: int) -> tuple[int, np.ndarray]:
        """Leases ``num_envs`` free rows to a writer; ends each row's stored episode.

        Returns:
            ``(lease_id, rows)`` with rows int64 ``[num_envs]``, ascending.

        Raises:
            InvalidArgumentError: ``num_envs`` < 1.
            NoFreeRowsError: more than free rows (after reclaiming the leases of
                dead writers).
        """
        positive_int("num_envs", num_envs)
        with self._lock:
            free = np.flatnonzero(self._owner == 0)
            if len(free) < num_envs:
                self._reclaim()
                free = np.flatnonzero(self._owner == 0)
            if len(free) < num_envs:
                raise NoFreeRowsError(
                    f"table {self.table!r} shard {self.index} has {len(free)} free row(s) of "
                    f"{len(self._owner)}; a writer asked for num_envs={num_envs}. Close unused "
                    "writers, ask for fewer rows, or serve the table with more num_envs."
                )
            rows = free[:num_envs].astype(np.int64)
            lease_id = self._new_lease_id()
            self._owner[rows] = lease_id
            self._leases[lease_id] = Lease(lease_id, rows, host, int(pid), time.monotonic())
            self._order.open(lease_id)
        self.buffer.table.end_episodes(rows)
        return lease_id, rows

    def _new_lease_id(self) -> int:
        while True:  # random, not counted: a restarted shard must not reuse an old writer's id
            lease_id = secrets.randbits(62) + 1
            if lease_id not in self._leases:
                return lease_id

    def _reclaim(self) -> None:
        now = time.monotonic()
        for lease in list(self._leases.values()):
            if lease.is_dead(now, self.lease_timeout):
                self._drop(lease.lease_id)

    def _drop(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._owner[lease.rows] = 0
            self._order.close(lease_id)

    def release(self, lease_id: int) -> None:
        """Frees the rows of ``lease_id`` (unknown ids are ignored: releasing is idempotent)."""
        with self._lock:
            self._drop(lease_id)

    def check_lease(self, lease_id: int) -> None:
        """Raises what an ``extend`` of ``lease_id`` would raise for the lease itself.

        Raises:
            StateError: the lease is not held (released, passed on, or given out
                before this shard restarted).
        """
        with self._lock:
            self._lease(lease_id)

    def _lease(self, lease_id: int) -> Lease:
        lease = self._leases.get(lease_id)
        if lease is None:
            raise StateError(
                f"table {self.table!r} shard {self.index}: writer lease {lease_id} is not held "
                f"(released, or passed to another writer after {self.lease_timeout:g} s without "
                "a write). Open a new writer."
            )
        return lease

    # -- writing --------------------------------------------------------------
    def extend(
        self,
        lease_id: int,
        leaves: list[np.ndarray],
        timeout: float | None = None,
        seq: int | None = None,
    ) -> int:
        """Appends ``T`` steps to each leased row: a writer's chunk, block-written as it came.

        The chunk is the writer's flat, already-cast leaves; the shard checks their
        dtypes and shapes (:class:`~recollect.service.shard.chunks.ChunkCheck`, no
        loop over leaves or steps) and writes them as ``ReplayBuffer.extend`` writes
        its converted leaves: no unflatten, flatten or cast.

        Args:
            lease_id: from :meth:`reserve`.
            leaves: one array per leaf of the spec, in its flat order, each
                ``[k, T, *leaf shape]`` (``k`` the lease's rows) of the leaf's dtype.
            timeout: rate-limiter wait, as in ``ReplayBuffer.add_batch``.
            seq: the chunk's number in its lease (counted from 0 by the writer), or
                None. A numbered chunk is stored after the one numbered ``seq - 1``
                (a transport may deliver them in any order), waiting for it at most
                ``max(lease_timeout, 1)`` seconds.

        Returns:
            Steps written (``k * T``).

        Raises:
            StateError: the lease is not held, or chunk ``seq - 1`` never came.
            SpecError, ShapeError, DTypeError: the leaves are not the spec's (nothing
                is written).
            RateLimiterTimeout: as ``ReplayBuffer.add_batch``.
        """
        with self._order.turn(lease_id, seq):
            with self._lock:
                lease = self._lease(lease_id)
                lease.last_active = time.monotonic()
                rows = lease.rows
            steps = self._check_chunk(leaves, len(rows))
            if self._draws_waiting:  # a draw waits for the table lock: it goes first
                with self._draws_done:
                    self._draws_done.wait_for(lambda: not self._draws_waiting, _YIELD_TO_DRAWS_S)
            self.buffer.writer.write_leaves(leaves, rows, timeout=timeout, block=True)
            with self._lock:
                self._counters.set_inserts(self.buffer.table.inserts)
                if lease_id in self._leases:
                    self._leases[lease_id].last_active = time.monotonic()
            return len(rows) * steps  # the whole chunk (a write stores all of it or raises)

    # -- sampling -------------------------------------------------------------
    def sampling_weight(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> tuple[float, int]:
        """``(weight, table_size)`` of this shard (:meth:`Table.sampling_weight`), after
        applying ``updates`` (priority updates a client sent along, see :meth:`sample_batches`)."""
        self._apply(updates)
        return self.buffer.table.sampling_weight(num_steps)

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Sample, float]:
        """Samples ``batch_size`` windows of this shard.

        Returns:
            ``(sample, weight)``: the local :class:`~recollect.Sample` and the
            shard's sampling weight at the draw, which turns local probabilities
            into global ones.

        Raises:
            As ``ReplayBuffer.sample``.
        """
        buf = self.buffer
        with self._draws_first(buf.writer.lock):
            draw = buf.table.draw(batch_size, num_steps, timeout=timeout, **(options or {}))
            weight = buf.table.draw_weight(draw)  # before max_times_sampled's removals
            return buf.reader.gather(draw), weight

    @contextlib.contextmanager
    def _draws_first(self, lock: Any) -> Any:
        """Holds the table ``lock`` for a draw, which inserts let go first.

        Python's locks are not fair: with several writers storing chunks back to
        back, the thread that releases the table lock often takes it again before
        a waiting draw runs, and a learner got 16% of its solo sample rate with 8
        writers on its shard (41% with them on another shard: the CPU share).
        While a draw waits for the lock, a new :meth:`extend` waits (at most
        ``_YIELD_TO_DRAWS_S``) until it has it; a draw waiting on the rate
        limiter holds the lock no more (the limiter's wait releases it), so
        inserts are not held back then.
        """
        with self._draws_done:
            self._draws_waiting += 1
        try:
            lock.acquire()
        finally:
            with self._draws_done:
                self._draws_waiting -= 1
                if not self._draws_waiting:
                    self._draws_done.notify_all()
        try:
            yield
        finally:
            lock.release()

    def sample_batches(
        self,
        sizes: list[int],
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
        updates: PriorityUpdates | None = None,
        client: int | None = None,
    ) -> SampledBatches:
        """Applies ``updates``, then draws one batch of ``sizes[i]`` windows per entry.

        Several batches in one request spread a transport's fixed cost per call
        (a Ray round trip) over them. Without a rate limiter or
        ``max_times_sampled`` the windows of all batches are drawn at once (draws
        with replacement from one table state are independent, so consecutive
        slices of one draw are batches drawn one after another); otherwise each
        batch is drawn on its own, under the lock, waiting on the rate limiter
        as one ``sample``, so writers go on between batches.

        Args:
            sizes: windows per batch (0: no window of that batch on this shard).
            num_steps, options: as :meth:`sample`.
            timeout: rate-limiter wait of the whole request (seconds, None: forever).
            updates: ``(ids, priorities)``, int64 and float64 ``[U]``: priority
                updates a client held back and sent along; applied first, so the
                draws see them.
            client: the id of the asking client, or None. A draw that waits on
                the rate limiter checks every :data:`CANCEL_CHECK_S` seconds
                whether that client was closed (:meth:`cancel`) and then raises
                StateError, so closing a client ends its blocked requests.

        Returns:
            :class:`SampledBatches`: the batches drawn, in order; fewer than
            ``len(sizes)`` when a batch after the first failed (the rate
            limiter's timeout ran out, say), with that batch's error.

        Raises:
            As ``ReplayBuffer.sample`` for the first batch drawn, and as
            ``ReplayBuffer.update_priorities`` for ``updates`` (nothing is drawn).
            StateError: ``client`` was closed (before or while the draw waited).
        """
        self._check_cancelled(client)
        self._apply(updates)
        sizes = [int(n) for n in sizes]
        table = self.buffer.table
        if table.rate_limiter is None and not table.max_times_sampled:
            if not sum(sizes):
                return SampledBatches(None, np.full(len(sizes), np.nan), np.zeros(len(sizes)))
            sample, weight = self.sample(sum(sizes), num_steps, timeout, options)
            return SampledBatches(
                sample, np.full(len(sizes), weight), np.full(len(sizes), sample.table_size)
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        samples: list[Sample] = []
        weights: list[float] = []
        table_sizes: list[int] = []
        error: BaseException | None = None
        for size in sizes:
            if not size:  # no draw here: the client keeps the weight it queried
                weights.append(np.nan)
                table_sizes.append(0)
                continue
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                sample, weight = self._sample_for(client, size, num_steps, wait, options)
            except Exception as err:
                if not samples:
                    raise
                error = err
                break
            samples.append(sample)
            weights.append(weight)
            table_sizes.append(sample.table_size)
        return SampledBatches(
            concatenate_samples(samples), np.array(weights), np.array(table_sizes), error
        )

    def _sample_for(
        self,
        client: int | None,
        size: int,
        num_steps: int | None,
        timeout: float | None,
        options: dict[str, Any] | None,
    ) -> tuple[Sample, float]:
        """:meth:`sample` for ``client``: a rate-limiter wait longer than
        :data:`CANCEL_CHECK_S` is cut into waits of that length, between which the
        client's :meth:`cancel` is checked (the same draw, the same error otherwise)."""
        if client is None or (timeout is not None and timeout <= CANCEL_CHECK_S):
            return self.sample(size, num_steps, timeout, options)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_cancelled(client)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= CANCEL_CHECK_S:
                try:
                    return self.sample(size, num_steps, max(left, 0.0), options)
                except RateLimiterTimeout as err:  # the message names the caller's timeout
                    message = str(err).replace(f"timeout={max(left, 0.0)}s", f"timeout={timeout}s")
                    raise RateLimiterTimeout(message) from None
            try:
                return self.sample(size, num_steps, CANCEL_CHECK_S, options)
            except RateLimiterTimeout:
                if threading.active_count() == 1:  # nothing could ever unblock it
                    raise

    def cancel(self, client: int) -> None:
        """Ends the waiting draws of ``client`` (a closed client's id) with StateError,
        within :data:`CANCEL_CHECK_S` seconds, and refuses its later requests."""
        now = time.monotonic()
        with self._lock:
            for old in [c for c, t in self._cancelled.items() if now - t > _CANCELLED_FOR_S]:
                del self._cancelled[old]
            self._cancelled[int(client)] = now

    def _check_cancelled(self, client: int | None) -> None:
        if client is not None and client in self._cancelled:
            raise StateError(
                f"this Client is closed; its sample request to table {self.table!r} shard "
                f"{self.index} ended."
            )

    def _apply(self, updates: PriorityUpdates | None) -> None:
        if updates is not None and len(updates[0]):
            self.update_priorities(*updates)

    def update_priorities(self, ids: Any, priorities: Any, counts: Any = None) -> int:
        """``ReplayBuffer.update_priorities``; returns the ids skipped.

        Args:
            ids, priorities: as ``ReplayBuffer.update_priorities``.
            counts: int ``[C]``, or None: the lengths of the client's calls that
                ``ids`` and ``priorities`` concatenate (held-back updates). They
                are applied at once; when that raises, call by call, so a bad
                call takes no other down with it (the first error is raised after
                the others were applied).
        """
        try:
            return self.buffer.update_priorities(ids, priorities)
        except InvalidArgumentError:
            if counts is None or len(counts) < 2:
                raise
        bounds = np.cumsum(counts)[:-1]
        skipped, error = 0, None
        for i, p in zip(np.split(ids, bounds), np.split(priorities, bounds), strict=True):
            try:
                skipped += self.buffer.update_priorities(i, p)
            except InvalidArgumentError as err:
                error = error or err
        if error is not None:
            raise error
        return skipped

    def sampling_bounds(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> tuple[float, int, float]:
        """``(weight, table_size, smallest sampling value)`` of this shard, after applying
        ``updates``: :meth:`sampling_weight` and the smallest positive ``(p + epsilon)^alpha``
        (``Prioritized.min_sampling_value``; ``inf`` when no window is sampleable), from
        which a client normalises importance weights buffer-wide."""
        self._apply(updates)
        table = self.buffer.table
        with table.lock:
            weight, size = table.sampling_weight(num_steps)
            return weight, size, table.min_sampling_value()

    def weight_normalization(self) -> str | None:
        """The sampler's ``weight_normalization`` (``"buffer"`` or ``"batch"``), or None."""
        return getattr(self.buffer.reader.sampler, "weight_normalization", None)

    def delete(self, ids: Any) -> int:
        """``ReplayBuffer.delete``; returns the ids skipped."""
        return self.buffer.delete(ids)

    # -- management -----------------------------------------------------------
    def info(self) -> TableInfo:
        """The buffer's :class:`TableInfo` with ``lost_steps`` and ``leased_rows`` set."""
        with self._lock:
            leased = int(np.count_nonzero(self._owner))
        return dataclasses.replace(
            self.buffer.info(), lost_steps=self._counters.lost_steps, leased_rows=leased
        )

    def reset(self) -> None:
        """Forgets every stored step (``ReplayBuffer.clear``); leases stay."""
        self.buffer.clear()
        self._counters.set_inserts(0)

    def save(self, path: str | os.PathLike) -> str:
        """Writes a checkpoint of the shard's buffer to ``path`` (atomic); returns it."""
        self.buffer.save(path)
        return str(path)

    def close(self) -> None:
        """Wakes waiting inserts and samples with StateError; flushes memmap storage."""
        self.buffer.close()
