"""The write path of :class:`~recollect.ReplayBuffer`: the one owner of writes to its storage.

Every write (``add``, ``add_batch`` with or without ``rows``, ``extend``,
``write_leaves``, and through them the transition and n-step writers, SB3
buffers, dataset imports and a served shard's chunks) takes the same three
stages:

1. validate and convert the input to flat leaves (``exact_matcher`` for input
   of the exact dtypes and shapes, the fast path; ``convert_step`` otherwise);
2. prepare them outside the table lock (compressed leaves are compressed here);
3. under the lock: wait on the rate limiter, ask the table for the slots of
   the next steps, mark memmap storage dirty, write storage, record the write
   in the table (:meth:`Table.insert <recollect.table.Table.insert>`, or
   :meth:`Table.insert_block <recollect.table.Table.insert_block>` for ``extend``).

Nothing is written before stage 3, so bad input never leaves the buffer
half-written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from recollect.buffers.buffer_part import BufferPart
from recollect.buffers.memmap_state import MemmapState
from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError, ShapeError
from recollect.specs import FlatSpec
from recollect.storage.base import Storage
from recollect.storage.episode_ends import EpisodeEnd, resolve_episode_end
from recollect.storage.factory import block_storage, prepare_writes
from recollect.storage.ring import RingStorage
from recollect.table import Table
from recollect.validation import check_structure, convert_step, exact_matcher

__all__ = ["BufferWriter", "check_rows", "episode_end_leaf"]


def episode_end_leaf(flat: FlatSpec) -> int | None:
    """Index of the top-level bool scalar ``is_last`` leaf (episode-aware mode), or None.

    Raises:
        SpecError: an ``is_last`` leaf that is not a bool scalar.
    """
    end = resolve_episode_end(flat)
    return None if end is None else end.index


def check_rows(rows: Any, num_envs: int) -> np.ndarray:
    """``rows`` as distinct int64 row indices in ``[0, num_envs)``.

    Raises:
        InvalidArgumentError: empty, not 1-D ints, out of range or repeated.
    """
    array = np.asarray(rows)
    if array.ndim != 1 or not len(array) or array.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"`rows` must be a non-empty 1-D sequence of int row indices; got {rows!r}."
        )
    array = array.astype(np.int64)
    bad = (array < 0) | (array >= num_envs)
    if bad.any():
        raise InvalidArgumentError(
            f"`rows` must lie in [0, num_envs={num_envs}); got {int(array[bad][0])}."
        )
    if len(np.unique(array)) != len(array):
        raise InvalidArgumentError(
            f"`rows` must be distinct (one step per row per call); got {array.tolist()}."
        )
    return array


class BufferWriter(BufferPart):
    """The one writer of a :class:`~recollect.ReplayBuffer` (``buffer.writer``; see the module
    doc): validates steps and writes them to the buffer's storage and table.

    Args:
        flat: the buffer's flattened spec.
        table: the buffer's table (clocks, window index, lock, rate limiter).
        storage: the buffer's storage.
        persist: the memmap bookkeeping (marks storage dirty before a write), or None.
        compressed: whether some leaves are compressed (compressed outside the lock).
        episode_end: the buffer's ``episode_end`` option or its resolved
            :class:`~recollect.storage.episode_ends.EpisodeEnd` (None: the spec's bool
            ``is_last`` leaf, if any; False: no episode ends); the table records the
            steps it marks as episode ends.

    Raises:
        SpecError, DTypeError, InvalidArgumentError: a bad ``episode_end`` (see
            :func:`~recollect.storage.episode_ends.resolve_episode_end`).
    """

    def __init__(
        self,
        flat: FlatSpec,
        table: Table,
        storage: Storage,
        persist: MemmapState | None = None,
        *,
        compressed: bool = False,
        episode_end: EpisodeEnd | str | tuple[str, Any] | bool | None = None,
    ) -> None:
        super().__init__(flat, table, storage)
        self._persist = persist
        end = resolve_episode_end(flat, episode_end)
        # the leaf marking episode ends, and the value that marks one (None: a bool leaf)
        self._is_last = None if end is None else end.index
        self._end_value = None if end is None else end.value
        # compressed leaves are compressed before the table lock is taken
        self._prepare: Callable[[list[np.ndarray]], list[np.ndarray]] | None = (
            prepare_writes(storage) if compressed else None
        )
        # input that needs no conversion (exact dtypes and shapes) skips convert_step
        self._match_batch = exact_matcher(self._flat, (self._num_envs,))
        self._match_step = exact_matcher(self._flat, ())
        # ``add`` (num_envs == 1, no memmap bookkeeping, no rate limiter): unbatched leaves
        # go straight into the plain numpy ring
        self._ring_writes = (
            self._persist is None
            and self._table.rate_limiter is None
            and type(self._storage) is RingStorage
            and self._num_envs == 1
        )
        # the unbatched fast path's ring write, bound once (a RingStorage only)
        self._write_unbatched: Callable[[int, list[np.ndarray]], None] | None = (
            getattr(storage, "write_unbatched", None) if self._ring_writes else None
        )
        # ``add_batch`` of every row into a plain numpy ring (no memmap bookkeeping, rate
        # limiter or compression): the ring's write of every row at one slot, looked up per
        # call (it is rebuilt with the ring's views)
        self._ring: RingStorage | None = (
            storage
            if self._persist is None
            and self._table.rate_limiter is None
            and type(storage) is RingStorage
            and self._prepare is None
            else None
        )

    @property
    def lock(self) -> Any:
        """The table's re-entrant lock; hold it to make several calls one atomic step."""
        return self._table.lock

    @property
    def max_length(self) -> int:
        """Steps per env row (``capacity // num_envs``)."""
        return self._max_length

    @property
    def num_envs(self) -> int:
        """Number of env rows (the leading dim of ``write_leaves`` leaves without ``rows``)."""
        return self._num_envs

    @property
    def episode_aware(self) -> bool:
        """Whether episode ends are recorded (a bool ``is_last`` leaf, or ``episode_end``)."""
        return self._is_last is not None

    def add(self, step: Any, *transition: Any, timeout: float | None = None) -> None:
        """Appends one step (a nest matching the spec, no env dim); only when ``num_envs == 1``.

        ``timeout``: as in :meth:`add_batch`. ``transition`` must be empty: it catches
        the ``add(s, a, r, s2, done)`` of a transition buffer (raises, naming it).

        Raises:
            InvalidArgumentTypeError: more than one positional value (a transition is
                :class:`~recollect.TransitionBuffer`'s ``add``).
            InvalidArgumentError: the buffer has several env rows.
            SpecError, ShapeError, DTypeError, CastError: the step does not
                match the spec; nothing is written.
        """
        if transition:
            raise InvalidArgumentTypeError(
                f"ReplayBuffer.add takes one step, a nest matching the spec (e.g. "
                f"{{'observation': s, 'action': a, ...}}); got {1 + len(transition)} positional "
                "values. For (s, a, r, s2, done) transitions use recollect.TransitionBuffer"
                "(capacity): its add(s, a, r, s2, terminated, truncated) or append((s, a, r, "
                "s2, done)); or write the step as a dict."
            )
        write = self._write_unbatched
        if write is not None:  # one env row in a plain numpy ring: the unbatched fast path
            leaves = self._match_step(step)  # exact dtypes and shapes: nothing to convert
            if leaves is not None:
                i, v = self._is_last, self._end_value
                # a 0-d leaf: no [1] array built
                ended = i is not None and bool(leaves[i] if v is None else leaves[i] == v)
                table = self._table
                with table.lock:  # one row: always one clock
                    write(table.clock % self._max_length, leaves)
                    table.insert_one(ended)
                return
        elif self._num_envs != 1:
            raise InvalidArgumentError(
                f"`add` takes one step and works only when num_envs == 1; this buffer has "
                f"num_envs={self._num_envs}. Use add_batch with leaves of leading dim "
                f"{self._num_envs}."
            )
        leaves = convert_step(self._flat, step, (), "add")  # casts, or the error
        self.write_leaves([leaf[None] for leaf in leaves], timeout=timeout)

    def add_batch(self, steps: Any, rows: Any = None, *, timeout: float | None = None) -> None:
        """Appends one step to every env row, or to the env rows ``rows`` only.

        Each row has its own clock: with ``rows``, only the listed rows advance,
        so writers of different rows may write at their own pace. Values are
        cast to the spec's dtype only when safe (``same_kind``, no value lost).
        The whole batch is validated before anything is written.

        Args:
            steps: a nest matching the spec; every leaf has leading dim
                ``num_envs`` (``len(rows)`` with ``rows``).
            rows: None (every row) or distinct int row indices in ``[0, num_envs)``.
            timeout: with a rate limiter, seconds to wait while it forbids the
                insert (None: forever, 0: never); ignored without one.

        Raises:
            SpecError: a leaf is missing or extra.
            ShapeError: a leaf's shape is not ``[num_envs, *leaf_shape]``.
            DTypeError: a dtype cannot be cast safely (e.g. float into an int leaf).
            CastError: a cast would lose values (out of range, overflow).
            InvalidArgumentError: ``rows`` empty, repeated, out of range or not integers.
            RateLimiterTimeout: the rate limiter still forbids the insert after ``timeout``.
            StateError: the buffer was closed while the insert waited.
        """
        if rows is None:
            leaves = self._match_batch(steps)  # the fast path: exact dtypes and shapes
            if leaves is None:  # anything unusual: the full check (casts, or the error)
                leaves = convert_step(self._flat, steps, (self._num_envs,), "add_batch")
            ring = self._ring
            if ring is not None:  # write_leaves of a plain ring, one call shorter
                i, v = self._is_last, self._end_value
                is_last = None if i is None else leaves[i] if v is None else leaves[i] == v
                table = self._table
                with table.lock:
                    _, slots = table.next_steps(None)  # an int when every row shares a clock
                    if type(slots) is int:  # one int-indexed setitem per leaf, unrolled
                        ring.write_columns(slots, leaves)
                    else:
                        ring.write(None, slots, leaves)
                    table.insert(None, slots, is_last)
                return
            self.write_leaves(leaves, timeout=timeout)
            return
        rows = check_rows(rows, self._num_envs)
        leaves = convert_step(self._flat, steps, (len(rows),), "add_batch")
        self.write_leaves(leaves, rows, timeout=timeout)

    def write_leaves(
        self,
        leaves: list[np.ndarray],
        rows: np.ndarray | None = None,
        *,
        timeout: float | None = None,
        block: bool = False,
    ) -> None:
        """Writes already validated flat leaves (``recollect.validation.convert_step`` output).

        Leaves have leading dim ``num_envs`` (``len(rows)`` with ``rows``, distinct
        rows). No check is made: use :meth:`add_batch` for user input. Waits on
        the rate limiter as :meth:`add_batch` does. With ``block``, every leaf is
        ``[k, T, *shape]``: ``T`` consecutive steps per row, written as :meth:`extend`
        writes them (a served shard's chunk: no unflatten, flatten or cast).
        """
        if block:
            self._write_steps(leaves, rows, timeout)
            return
        if self._prepare is not None:
            leaves = self._prepare(leaves)
        i, v = self._is_last, self._end_value  # inline: the hot path takes no extra call
        is_last = None if i is None else leaves[i] if v is None else leaves[i] == v
        table = self._table
        with table.lock:
            if table.rate_limiter is not None:
                table.await_insert(self._num_envs if rows is None else len(rows), timeout)
            times, slots = table.next_steps(rows)  # scalars when every row shares one clock
            if self._persist is not None:
                self._persist.before_write(rows, times)
            self._storage.write(rows, slots, leaves, times=times)
            table.insert(rows, slots, is_last)

    def _ends(self, leaves: list[np.ndarray]) -> np.ndarray | None:
        """Bool episode-end flags of a write's leaves (shaped as the flag leaf), or None."""
        i = self._is_last
        if i is None:
            return None
        v = self._end_value
        return leaves[i] if v is None else leaves[i] == v

    def extend(self, steps: Any, rows: Any = None, *, timeout: float | None = None) -> None:
        """Appends ``T`` consecutive steps to every env row, or to the rows ``rows`` only.

        Equals ``T`` calls of :meth:`add_batch` with ``steps[:, t]`` (same
        stored data, ids, windows and later samples), validated as a whole
        before anything is written, and written with one numpy assignment per
        leaf for up to ``max_length`` steps at a time. Samplers that track each
        write without a block hook (``Sampler.on_add_block``; prioritized has one),
        frame-stack storage and rate-limited tables take the step-by-step path
        (each step waits on the limiter as :meth:`add_batch`, with ``timeout``).

        Args:
            steps: a nest matching the spec; every leaf ``[num_envs, T, *shape]``
                (``[len(rows), T, ...]`` with ``rows``), oldest step first.
            rows: None (every row) or distinct int row indices in ``[0, num_envs)``.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: as :meth:`add_batch`;
                nothing is written.
            InvalidArgumentError: bad ``rows``.
        """
        if rows is not None:
            rows = check_rows(rows, self._num_envs)
        k = self._num_envs if rows is None else len(rows)
        values = check_structure(self._flat, steps, "extend")
        count = int(np.shape(values[0])[1]) if np.ndim(values[0]) >= 2 else -1
        if count < 0:
            raise ShapeError(
                f"extend needs leaves [num_envs or len(rows), T, *shape]; leaf "
                f"'{self._flat.paths[0]}' has shape {np.shape(values[0])}. Use add_batch for "
                "one step."
            )
        leaves = convert_step(self._flat, steps, (k, count), "extend")
        self._write_steps(leaves, rows, timeout)

    def _write_steps(
        self, leaves: list[np.ndarray], rows: np.ndarray | None, timeout: float | None
    ) -> None:
        """Writes converted leaves ``[k, T, *shape]`` (``T`` steps per row)."""
        count = leaves[0].shape[1]
        if not count:
            return
        table = self._table
        block = table.block_writes and table.rate_limiter is None
        if not (block and block_storage(self._storage)):
            for j in range(count):  # step by step: the sampler, storage or limiter follows
                self.write_leaves([leaf[:, j] for leaf in leaves], rows, timeout=timeout)
            return
        for start in range(0, count, self._max_length):  # chunks of at most one ring
            chunk = [leaf[:, start : start + self._max_length] for leaf in leaves]
            if self._prepare is not None:  # compressed leaves: compressed outside the lock
                chunk = self._prepare(chunk)
            self._write_block(chunk, rows)

    def _write_block(self, leaves: list[np.ndarray], rows: np.ndarray | None) -> None:
        count = leaves[0].shape[1]
        is_last = self._ends(leaves)
        table = self._table
        with table.lock:
            clocks = table.clocks if rows is None else table.clocks[rows]
            times = clocks[:, None] + np.arange(count)
            slots = times % self._max_length
            if self._persist is not None:
                self._persist.before_write(rows, times[:, -1])
            self._storage.write(rows, slots, leaves, times=times)
            table.insert_block(rows, slots, count, is_last)
