"""Shard: one part of a served table (a ReplayBuffer) plus the row leases of its writers.

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

import dataclasses
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import optree

from recollect.buffers import ReplayBuffer, Sample
from recollect.errors import InvalidArgumentError, StateError
from recollect.table import TableInfo

__all__ = [
    "Lease",
    "PriorityUpdates",
    "SampledBatches",
    "Shard",
    "ShardDescription",
    "concatenate_samples",
    "open_shard",
]

#: ``(ids, priorities)``: int64 and float64 ``[U]`` priority updates sent along with a request
PriorityUpdates = tuple[np.ndarray, np.ndarray]


@dataclasses.dataclass
class Lease:
    """Rows reserved by one writer.

    Attributes:
        lease_id: positive int below 2**62, drawn at random, so an id from
            before a restart of the shard never names a lease after it.
        rows: int64 ``[k]`` the leased rows.
        host: host name of the writer's process.
        pid: process id of the writer.
        last_active: ``time.monotonic()`` of the reservation or the last write.
    """

    lease_id: int
    rows: np.ndarray
    host: str
    pid: int
    last_active: float

    def is_dead(self, now: float, timeout: float) -> bool:
        """Whether the writer is gone: its process died on this host, or it idled ``timeout`` s."""
        if now - self.last_active > timeout:
            return True
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


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
        cat([s.ids for s in samples]),
        cat([s.probabilities for s in samples]),
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
    """

    table: str
    shard: int
    data_spec: Any
    num_envs: int
    sequence_length: int | None
    sampler: str
    importance_sampling_exponent: float | None
    rate_limited: bool


class Shard:
    """One shard of a served table.

    Args:
        table: the table's name (in error messages).
        buffer: the shard's :class:`~recollect.ReplayBuffer` (its ``shard`` id set).
        lease_timeout: seconds without a write after which a lease may pass to a
            new writer that finds no free row.
        counters: int64 ``[2]`` array (``[inserts, lost steps]``), memory-mapped
            next to the checkpoints when the service has a ``checkpoint_dir``, so
            a restarted shard knows how many steps it lost.
    """

    def __init__(
        self,
        table: str,
        buffer: ReplayBuffer,
        *,
        lease_timeout: float = 60.0,
        counters: np.ndarray | None = None,
    ) -> None:
        self.table = table
        self.buffer = buffer
        self.index = buffer.table.shard
        self.lease_timeout = float(lease_timeout)
        self._counters = np.zeros(2, np.int64) if counters is None else counters
        self._owner = np.zeros(buffer.num_envs, np.int64)  # lease id of each row, 0: free
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()

    # -- description --------------------------------------------------------
    def describe(self) -> ShardDescription:
        """The :class:`ShardDescription` of this shard."""
        buf = self.buffer
        return ShardDescription(
            table=self.table,
            shard=self.index,
            data_spec=buf.data_spec,
            num_envs=buf.num_envs,
            sequence_length=buf.sequence_length,
            sampler=buf.sampler.name,
            importance_sampling_exponent=getattr(buf.sampler, "importance_sampling_exponent", None),
            rate_limited=buf.table.rate_limiter is not None,
        )

    # -- leases ---------------------------------------------------------------
    def reserve(self, num_envs: int, host: str, pid: int) -> tuple[int, np.ndarray]:
        """Leases ``num_envs`` free rows to a writer; ends each row's stored episode.

        Returns:
            ``(lease_id, rows)`` with rows int64 ``[num_envs]``, ascending.

        Raises:
            InvalidArgumentError: ``num_envs`` < 1 or more than free rows (after
                reclaiming the leases of dead writers).
        """
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise InvalidArgumentError(f"`num_envs` must be an int >= 1; got {num_envs!r}.")
        with self._lock:
            free = np.flatnonzero(self._owner == 0)
            if len(free) < num_envs:
                self._reclaim()
                free = np.flatnonzero(self._owner == 0)
            if len(free) < num_envs:
                raise InvalidArgumentError(
                    f"table {self.table!r} shard {self.index} has {len(free)} free row(s) of "
                    f"{len(self._owner)}; a writer asked for num_envs={num_envs}. Close unused "
                    "writers, ask for fewer rows, or serve the table with more num_envs."
                )
            rows = free[:num_envs].astype(np.int64)
            lease_id = self._new_lease_id()
            self._owner[rows] = lease_id
            self._leases[lease_id] = Lease(lease_id, rows, host, int(pid), time.monotonic())
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
    def extend(self, lease_id: int, steps: Any, timeout: float | None = None) -> int:
        """Appends ``T`` steps to each leased row (``ReplayBuffer.extend``, validated as a whole).

        Args:
            lease_id: from :meth:`reserve`.
            steps: a nest matching the spec, leaves ``[k, T, *shape]``.
            timeout: rate-limiter wait, as in ``ReplayBuffer.add_batch``.

        Returns:
            Steps written (``k * T``).

        Raises:
            StateError: the lease is not held.
            SpecError, ShapeError, DTypeError, CastError: as ``ReplayBuffer.extend``;
                nothing is written.
            RateLimiterTimeout: as ``ReplayBuffer.add_batch``.
        """
        with self._lock:
            lease = self._lease(lease_id)
            lease.last_active = time.monotonic()
            rows = lease.rows
        before = self.buffer.table.inserts
        self.buffer.extend(steps, rows, timeout=timeout)
        with self._lock:
            written = self.buffer.table.inserts - before
            self._counters[0] = self.buffer.table.inserts
            if lease_id in self._leases:
                self._leases[lease_id].last_active = time.monotonic()
        return int(written)

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
        with buf.lock:
            draw = buf.table.draw(batch_size, num_steps, timeout=timeout, **(options or {}))
            weight = buf.table.draw_weight(draw)  # before max_times_sampled's removals
            return buf.gather(draw), weight

    def sample_batches(
        self,
        sizes: list[int],
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
        updates: PriorityUpdates | None = None,
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

        Returns:
            :class:`SampledBatches`: the batches drawn, in order; fewer than
            ``len(sizes)`` when a batch after the first failed (the rate
            limiter's timeout ran out, say), with that batch's error.

        Raises:
            As ``ReplayBuffer.sample`` for the first batch drawn, and as
            ``ReplayBuffer.update_priorities`` for ``updates`` (nothing is drawn).
        """
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
                sample, weight = self.sample(size, num_steps, wait, options)
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

    def _apply(self, updates: PriorityUpdates | None) -> None:
        if updates is not None and len(updates[0]):
            self.update_priorities(*updates)

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """``ReplayBuffer.update_priorities``; returns the ids skipped."""
        return self.buffer.update_priorities(ids, priorities)

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
        return getattr(self.buffer.sampler, "weight_normalization", None)

    def delete(self, ids: Any) -> int:
        """``ReplayBuffer.delete``; returns the ids skipped."""
        return self.buffer.delete(ids)

    # -- management -----------------------------------------------------------
    def info(self) -> TableInfo:
        """The buffer's :class:`TableInfo` with ``lost_steps`` and ``leased_rows`` set."""
        with self._lock:
            leased = int(np.count_nonzero(self._owner))
        return dataclasses.replace(
            self.buffer.info(), lost_steps=int(self._counters[1]), leased_rows=leased
        )

    def reset(self) -> None:
        """Forgets every stored step (``ReplayBuffer.clear``); leases stay."""
        self.buffer.clear()
        self._counters[0] = 0

    def save(self, path: str | os.PathLike) -> str:
        """Writes a checkpoint of the shard's buffer to ``path`` (atomic); returns it."""
        self.buffer.save(path)
        return str(path)

    def close(self) -> None:
        """Wakes waiting inserts and samples with StateError; flushes memmap storage."""
        self.buffer.close()


def shard_path(directory: str | os.PathLike, table: str, shard: int) -> Path:
    """Checkpoint directory of shard ``shard`` of ``table`` under a service checkpoint."""
    return Path(directory) / table / f"shard-{shard}"


def open_shard(
    table: str,
    buffer: ReplayBuffer,
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    lease_timeout: float = 60.0,
) -> Shard:
    """A :class:`Shard` of ``buffer``, restored from ``checkpoint_dir`` when it holds one.

    With a ``checkpoint_dir``, the shard keeps ``[inserts, lost steps]`` in a
    memory-mapped file next to its checkpoint, written on every insert; a shard
    restored after a crash counts the inserts made after the checkpoint as lost.

    Raises:
        CheckpointError: the checkpoint is damaged.
        InvalidArgumentError: it holds a buffer of another configuration.
    """
    if checkpoint_dir is None:
        return Shard(table, buffer, lease_timeout=lease_timeout)
    shard = buffer.table.shard
    path = shard_path(checkpoint_dir, table, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    counters_file = path.parent / f"shard-{shard}.counters"
    if not counters_file.exists():
        np.zeros(2, np.int64).tofile(counters_file)
    counters = np.memmap(counters_file, np.int64, "r+", shape=(2,))
    if path.exists():
        saved = ReplayBuffer.load(path)
        buffer.load_state_dict(saved.state_dict())
    restored = buffer.table.inserts
    lost = max(int(counters[0]) - restored, 0)  # inserts made after the checkpoint
    counters[1] += lost
    counters[0] = restored
    return Shard(table, buffer, lease_timeout=lease_timeout, counters=counters)
