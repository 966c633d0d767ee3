"""The client side of a writer: column buffers, data references and pending items.

This is what Reverb's C++ ``TrajectoryWriter`` does for its Python face. Each
column (a flattened leaf path) has its own step counter; ``append`` returns one
:class:`CellRef` per given value. Items are queued client side as runs of one
layout and sent, with the steps not yet sent, in one ``write`` call of the
channel (``flush``, ``end_episode``, when ``MAX_PENDING`` items are queued, or
from the linger thread once the oldest queued item has waited ``LINGER_S`` seconds:
see :mod:`recollect.reverb.linger`).
A reference older than the column's last ``num_keep_alive_refs`` steps has
expired: items can no longer use it and the server drops its hold on it.
"""

from __future__ import annotations

import datetime
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Self, cast

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.reverb.cells import PLAIN_KINDS, CellRef, StreamColumn
from recollect.reverb.errors import DeadlineExceededError
from recollect.reverb.linger import LINGER, RETRY_MAX_S

MAX_PENDING = 256  # items queued before create_item sends them (and may block)
MAX_UNSENT = 512  # steps of a column buffered before they are sent without items


class WriterStream:
    """One writer's columns and queue over a channel (see the module docstring)."""

    def __init__(self, channel: Any, num_keep_alive_refs: int) -> None:
        self.channel = channel
        self.keep = int(num_keep_alive_refs)
        self.stream = int(channel.call("open_stream", {}, None))
        self.columns: list[StreamColumn] = []
        self.episode_steps = 0
        self.episode = secrets.randbits(62)
        self.runs: list[tuple[tuple, dict[str, Any]]] = []
        self.pending = 0
        self.unsent_steps = 0  # append calls since the last send
        self._kinds: list[type | None] | None = None  # the columns' kinds (None: stale)
        self._array_columns: list[int] = []  # the columns whose kind is np.ndarray
        self.closed = False
        # Held by every method that reads or changes the queue or the columns: the linger
        # thread (recollect.reverb.linger) sends a quiet writer's queue from its own thread.
        self.lock = threading.RLock()
        self.error: BaseException | None = None  # a linger send's failure, for the next call
        self.queued_at = 0.0  # time.monotonic() when the queue last stopped being empty
        self.retry_s = 0.0  # the linger thread's wait before it tries refused items again

    def configure(self, column: int, num_keep_alive_refs: int) -> None:
        with self.lock:
            self._column(column).keep = int(num_keep_alive_refs)

    def _column(self, index: int) -> StreamColumn:
        while len(self.columns) <= index:
            self.columns.append(StreamColumn(self, len(self.columns), self.keep))
            self.kinds_changed()
        return self.columns[index]

    @property
    def max_num_keep_alive_refs(self) -> int:
        return max([self.keep] + [c.keep for c in self.columns])

    def kinds_changed(self) -> None:
        """A column was added or got its kind: :meth:`append_whole` rereads them."""
        self._kinds = None

    def append_whole(self, values: list[Any]) -> list[CellRef] | None:
        """:meth:`append` of a whole step whose every value has exactly its column's kind
        (the type of its first value: an array of the column's dtype and shape, or that
        numpy scalar type); None, with nothing done, for any other step (then call
        :meth:`append`). ``values`` (one per column) is the caller's to give away."""
        with self.lock:
            kinds = self._kinds
            if kinds is None:
                kinds = self._kinds = [c.kind for c in self.columns]
                self._array_columns = [i for i, k in enumerate(kinds) if k is np.ndarray]
            if self.closed or list(map(type, values)) != kinds:
                return None
            cols = self.columns
            for i in self._array_columns:
                value, col = values[i], cols[i]
                if value.dtype != col.dtype or value.shape != col.shape:
                    return None
            for i in self._array_columns:
                values[i] = values[i].copy()  # the caller may reuse its arrays
            refs = cast("list[CellRef]", self._store(cols, values))  # no None among values
            self.episode_steps += 1
            self.unsent_steps += 1
            if self.unsent_steps >= MAX_UNSENT:
                self._send(None)
            return refs

    def append(self, flat: list[Any], partial: bool) -> list[CellRef | None]:
        """Appends one (partial) step; ``flat[i]`` is column ``i``'s value or None.

        Every value is validated before any is stored; arrays are copied (as Reverb does),
        so the caller may reuse its buffers. Numpy scalars (immutable) are kept as given.
        """
        with self.lock:
            if self.closed:
                raise InvalidArgumentError("the writer is closed; create a new one.")
            if self.error is not None:
                self._raise_error()
            if len(self.columns) < len(flat):
                self._column(len(flat) - 1)
            cols = self.columns if len(self.columns) == len(flat) else self.columns[: len(flat)]
            values: list[Any] = []
            for col, value in zip(cols, flat, strict=True):  # validate every value first
                kind = type(value)
                if kind is col.kind:  # the column's first value's type: the fast check
                    if kind is np.ndarray:
                        if value.dtype != col.dtype or value.shape != col.shape:
                            col.check(value)
                        value = value.copy()
                    values.append(value)
                elif value is None:
                    values.append(None)
                else:
                    values.append(col.admit(value))
            refs = self._store(cols, values)
            if not partial:
                self.episode_steps += 1
            self.unsent_steps += 1  # an upper bound of every column's unsent values
            if self.unsent_steps >= MAX_UNSENT:
                self._send(None)
            return refs

    @staticmethod
    def _store(cols: list[StreamColumn], values: list[Any]) -> list[CellRef | None]:
        """Appends each checked value to its column (None: that column has no value this
        step) and returns the references; expires what falls out of a column's window."""
        refs: list[CellRef | None] = []
        for col, value in zip(cols, values, strict=True):
            if value is None:
                refs.append(None)
                continue
            step = col.next_step
            refs.append(CellRef(col, step, value))
            col.unsent.append(value)
            col.next_step = step + 1
            if step + 1 - col.keep > col.alive_from:
                col.alive_from = step + 1 - col.keep
        return refs

    def create_item(
        self,
        table: str,
        priority: float,
        columns: Sequence[Sequence[CellRef]],
        squeeze: list[bool],
        per_step: bool = False,
    ) -> None:
        """Queues an item; sends the queue when it reaches ``MAX_PENDING`` items."""
        with self.lock:
            if self.closed:
                raise InvalidArgumentError("the writer is closed; create a new one.")
            if self.error is not None:
                self._raise_error()
            ids: list[int] = []
            lengths: list[int] = []
            steps: list[int] = []  # every column's steps, one after the other
            for i, refs in enumerate(columns):
                if not refs:
                    raise InvalidArgumentError(
                        f"Column {i} of the trajectory is empty; every column needs a reference."
                    )
                column = refs[0].owner
                first = len(steps)
                for ref in refs:  # one pass: the field of every reference, and its step
                    if ref.owner is not column:
                        raise InvalidArgumentError(
                            f"Column {i} of the trajectory mixes references of different "
                            "appended fields; recollect.reverb needs each trajectory column to "
                            "come from one field (slice one history column)."
                        )
                    steps.append(ref.step)
                if min(steps[first:]) < column.alive_from:
                    raise InvalidArgumentError(
                        f"Error in column {i}: Column contains expired data (references older "
                        f"than num_keep_alive_refs={column.keep} steps). Raise num_keep_alive_refs."
                    )
                ids.append(column.index)
                lengths.append(len(refs))
            key = (table, tuple(ids), tuple(lengths), tuple(map(bool, squeeze)), per_step, False)
            self._enqueue(key, priority, steps)

    def create_span_item(
        self,
        table: str,
        priority: float,
        spans: list[tuple[StreamColumn, int, int]],
        squeeze: list[bool],
    ) -> None:
        """:meth:`create_item` of columns given as ``(column, first step, count)`` spans of
        consecutive steps (what history slices make): the same checks and queue, without
        reading every reference (a run of such items keeps each item's first steps)."""
        with self.lock:
            if self.closed:
                raise InvalidArgumentError("the writer is closed; create a new one.")
            if self.error is not None:
                self._raise_error()
            columns, firsts, counts = zip(*spans, strict=True)
            for i, (column, first) in enumerate(zip(columns, firsts, strict=True)):
                if first < column.alive_from:
                    raise InvalidArgumentError(
                        f"Error in column {i}: Column contains expired data (references older "
                        f"than num_keep_alive_refs={column.keep} steps). Raise num_keep_alive_refs."
                    )
            self._enqueue((table, columns, counts, tuple(squeeze), False, True), priority, [firsts])

    def _enqueue(self, key: tuple, priority: float, steps: list) -> None:
        """Queues one checked item in the run of layout ``key`` (a new run when the last one
        has another layout); sends the queue at ``MAX_PENDING`` items, else arms the linger
        thread when the queue was empty."""
        if not self.runs or self.runs[-1][0] != key:
            self.runs.append((key, {"priorities": [], "episodes": [], "steps": []}))
        run = self.runs[-1][1]
        run["priorities"].append(float(priority))
        run["episodes"].append(self.episode)
        run["steps"].extend(steps)
        self.pending += 1
        if self.pending >= MAX_PENDING:
            self._send(None)
        elif self.pending == 1:
            self.queued_at = time.monotonic()
            self.retry_s = LINGER.delay
            LINGER.arm(self)

    def send_lingering(self) -> float | None:
        """The linger thread's send (:class:`~recollect.reverb.linger.Lingering`): once the
        oldest queued item has waited ``LINGER.delay``, sends what the tables take now,
        without waiting. Returns the seconds until the next try (a queue that is younger,
        since the writer sent its last one; a stream busy in another thread; items the
        tables refused, tried after 2x the last wait, at most ``RETRY_MAX_S``), or None. A
        failure is kept for the writer's next call."""
        if not self.lock.acquire(blocking=False):
            return LINGER.delay  # the writer is in a call
        try:
            if self.closed or not self.pending:
                return None
            young = self.queued_at + LINGER.delay - time.monotonic()
            if young > 0:
                return young
            try:
                self._send(0.0)
            except Exception as err:
                self.error = err
                return None
            if not self.pending:
                return None
            self.retry_s = min(2 * self.retry_s, max(RETRY_MAX_S, LINGER.delay))
            return self.retry_s
        finally:
            self.lock.release()

    def _raise_error(self) -> None:
        """Raises (once) what a linger send failed with; its items were dropped."""
        err, self.error = self.error, None
        assert err is not None
        err.add_note("Raised by a background send of queued items; those items were dropped.")
        raise err

    def _groups(self, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` queued items as runs of one layout."""
        groups = []
        for (table, ids, lengths, squeeze, per_step, spans), full in self.runs:
            if limit <= 0:
                break
            n = min(limit, len(full["priorities"]))
            limit -= n
            if spans:  # ids are the columns; steps, each item's first step per column
                firsts = np.array(full["steps"][:n], np.int64).reshape(n, len(ids))
                ids = tuple(column.index for column in ids)
                steps = [firsts[:, c, None] + np.arange(m) for c, m in enumerate(lengths)]
            else:  # a run's items have one layout: their steps are one [n, sum(lengths)] array
                width = sum(lengths)
                flat = np.array(full["steps"][: n * width], np.int64).reshape(n, width)
                steps = np.split(flat, np.cumsum(lengths)[:-1].tolist(), axis=1)
            groups.append(
                {
                    "table": table,
                    "priorities": np.array(full["priorities"][:n], np.float64),
                    "episodes": np.array(full["episodes"][:n], np.int64),
                    "columns": list(ids),
                    "steps": steps,
                    "squeeze": list(squeeze),
                    "per_step": per_step,
                }
            )
        return groups

    def _drop_sent(self, count: int) -> None:
        """Removes the first ``count`` queued items (they were inserted)."""
        self.pending -= count
        while count:
            key, run = self.runs[0]
            n = len(run["priorities"])
            if count >= n:
                self.runs.pop(0)
                count -= n
            else:
                del run["priorities"][:count]
                del run["episodes"][:count]
                del run["steps"][: count if key[5] else count * sum(key[2])]
                count = 0

    def _send(self, timeout: float | None, limit: int | None = None) -> bool:
        """Sends unsent steps and the first ``limit`` (None: all) queued items; True when
        all of those went in."""
        chunks = []
        for col in self.columns:
            if col.unsent:
                assert col.dtype is not None  # set by the column's first value
                if col.dtype.kind in PLAIN_KINDS:  # arrays or scalars of one dtype and shape
                    data = np.array(col.unsent, col.dtype)  # ~4x faster than np.stack
                else:
                    data = np.stack([np.asarray(v) for v in col.unsent])
                chunks.append({"column": col.index, "first_step": col.sent, "data": data})
                col.sent += len(col.unsent)
                col.unsent = []
        self.unsent_steps = 0
        release_cols = np.asarray([c.index for c in self.columns], np.int64)
        release_steps = np.asarray([c.alive_from for c in self.columns], np.int64)
        total = self.pending if limit is None else min(limit, self.pending)
        try:
            done = self._write(chunks, total, release_cols, release_steps, timeout)
        except Exception:
            self.runs, self.pending = [], 0  # rejected items are dropped, as Reverb does
            raise
        self._drop_sent(done)
        return done == total

    def _write(
        self,
        chunks: list,
        total: int,
        release_cols: np.ndarray,
        release_steps: np.ndarray,
        timeout: float | None,
    ) -> int:
        return int(
            self.channel.call(
                "write",
                {
                    "stream": self.stream,
                    "chunks": chunks,
                    "items": self._groups(total),
                    "release_columns": release_cols,
                    "release_steps": release_steps,
                    "timeout": timeout,
                },
                None,
            )
        )

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None) -> None:
        """Sends queued items until at most ``block_until_num_items`` remain queued.

        Raises:
            InvalidArgumentError: ``block_until_num_items < 0``.
            DeadlineExceededError: ``timeout_ms`` passed first (the rest stays queued).
        """
        with self.lock:
            if self.error is not None:
                self._raise_error()
            if block_until_num_items < 0:
                raise InvalidArgumentError(
                    f"block_until_num_items must be >= 0, got {block_until_num_items}"
                )
            timeout = None if timeout_ms is None or timeout_ms < 0 else timeout_ms / 1000.0
            if block_until_num_items > 0:
                self._send(0.0)  # whatever the tables take now, without waiting
                if self.pending <= block_until_num_items:
                    return
            if not self._send(timeout, self.pending - block_until_num_items):
                raise DeadlineExceededError(
                    "Flush call did not complete within provided timeout of "
                    f"{datetime.timedelta(milliseconds=timeout_ms or 0)}: {self.pending} items "
                    "still wait on the table's rate limiter (they stay queued)."
                )

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Sends everything, starts a new episode; with ``clear_buffers`` expires every ref."""
        with self.lock:
            try:
                self.flush(0, timeout_ms)
            finally:
                self.episode = secrets.randbits(62)
                self.episode_steps = 0
                if clear_buffers:
                    for col in self.columns:
                        col.alive_from = col.next_step
            if clear_buffers and not self.pending:
                self._send(None)  # releases the server's hold on the expired steps

    def abandon(self) -> None:
        """:meth:`close` for a writer being collected (``__del__``): errors are swallowed."""
        if not self.closed:
            try:
                self.close()
            except Exception:
                pass

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            try:
                if self.pending:  # what the tables take now; the rest is dropped (as Reverb)
                    self._send(0.0)
            finally:
                self.closed = True
                try:
                    self.channel.call("close_stream", {"stream": self.stream}, None)
                except Exception:
                    pass


class StreamWriter:
    """The base of the writers over one :class:`WriterStream` (``TrajectoryWriter``,
    ``StructuredWriter``): a context manager whose collection abandons the stream, with
    their shared ``flush``.

    Args:
        stream: the writer's stream to the server.
    """

    def __init__(self, stream: WriterStream) -> None:
        self._stream = stream

    def __enter__(self) -> Self:
        return self

    def __del__(self) -> None:
        stream = getattr(self, "_stream", None)
        if stream is not None:
            stream.abandon()

    def _append(
        self, flat: list[Any], partial: bool, column_name: Callable[[int], str]
    ) -> list[CellRef | None]:
        """``stream.append``; its ValueError naming one column (``for column N``) names it
        ``for column {column_name(N)}`` instead (the writer knows the column's field path)."""
        try:
            return self._stream.append(flat, partial)
        except ValueError as err:
            found = re.findall(r" for column (\d+)", str(err))
            if len(found) != 1:
                raise
            named = f"for column {column_name(int(found[0]))}"
            raise type(err)(str(err).replace(f"for column {found[0]}", named)) from err

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None) -> None:
        """Sends queued items until at most ``block_until_num_items`` remain queued.

        Raises:
            InvalidArgumentError (a ValueError): ``block_until_num_items < 0``.
            DeadlineExceededError: ``timeout_ms`` passed first (the rest stays queued).
        """
        self._stream.flush(block_until_num_items, timeout_ms)
