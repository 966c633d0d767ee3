"""The client side of a writer: column buffers, data references and pending items.

This is what Reverb's C++ ``TrajectoryWriter`` does for its Python face. Each
column (a flattened leaf path) has its own step counter; ``append`` returns one
:class:`CellRef` per given value. Items are queued client side as runs of one
layout and sent, with the steps not yet sent, in one ``write`` call of the
channel (``flush``, ``end_episode``, or when ``MAX_PENDING`` items are queued).
A reference older than the column's last ``num_keep_alive_refs`` steps has
expired: items can no longer use it and the server drops its hold on it.
"""

from __future__ import annotations

import datetime
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Self

import numpy as np

from recollect.errors import InvalidArgumentError, SpecError
from recollect.reverb import signature as _signature
from recollect.reverb.errors import DeadlineExceededError

MAX_PENDING = 256  # items queued before create_item sends them (and may block)
MAX_UNSENT = 512  # steps of a column buffered before they are sent without items


_PLAIN_KINDS = frozenset("biufc")


def to_array(value: Any) -> np.ndarray:
    """A value as the array Reverb stores: str and bytes become object arrays of bytes."""
    if type(value) is np.ndarray and value.dtype.kind in _PLAIN_KINDS:
        return value
    array = np.asarray(value)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8").astype(object)
    if array.dtype.kind == "S":
        return array.astype(object)
    if array.dtype.kind == "O":
        flat = [v.encode("utf-8") if isinstance(v, str) else v for v in array.reshape(-1)]
        out = np.empty(array.shape, object)
        out.reshape(-1)[:] = flat
        return out
    return array


class CellRef:
    """A reference to one appended value of one column (Reverb's ``WeakCellRef``)."""

    __slots__ = ("_column", "_value", "step")

    def __init__(self, column: _Column, step: int, value: np.ndarray | None) -> None:
        # value None: a reference made by the legacy ``Writer.create_item``, which
        # only reads its column and step
        self._column = column
        self.step = step
        self._value = value

    @property
    def column(self) -> int:
        return self._column.index

    @property
    def owner(self) -> _Column:
        """The column history the value was appended to."""
        return self._column

    @property
    def expired(self) -> bool:
        return self.step < self._column.alive_from

    @property
    def shape(self) -> tuple[int, ...]:
        return self.numpy().shape

    @property
    def dtype(self) -> np.dtype:
        return self.numpy().dtype

    def numpy(self) -> np.ndarray:
        if self._value is None:
            raise InvalidArgumentError(
                f"{self!r} was made by Writer.create_item and holds no value; read values "
                "through the CellRefs TrajectoryWriter.append returns."
            )
        return self._value

    def __repr__(self) -> str:
        return f"CellRef(column={self.column}, step={self.step}, expired={self.expired})"


@dataclass
class _Column:
    index: int
    keep: int
    dtype: np.dtype | None = None
    shape: tuple[int, ...] | None = None
    next_step: int = 0
    sent: int = 0  # steps already sent
    alive_from: int = 0
    unsent: list[np.ndarray] = field(default_factory=list)

    def check(self, value: np.ndarray) -> None:
        if self.dtype is None or self.shape is None:  # set together, by the first value
            self.dtype, self.shape = value.dtype, value.shape
            return
        if value.dtype == self.dtype and value.shape == self.shape:
            return
        if _signature.dtype_name(value.dtype) != _signature.dtype_name(self.dtype):
            raise SpecError(
                f"Tensor of wrong dtype provided for column {self.index}. Got "
                f"{_signature.dtype_name(value.dtype)} but expected "
                f"{_signature.dtype_name(self.dtype)}. Hint: a column keeps the dtype of its "
                f"first value ({self.dtype}); cast the value (got {value.dtype})."
            )
        if value.shape != self.shape:
            raise SpecError(
                f"Tensor of incompatible shape provided for column {self.index}. Got "
                f"{_signature.shape_text(value.shape)} which is incompatible with "
                f"{_signature.shape_text(self.shape)}. Hint: a column keeps the shape of its "
                "first value; reshape or use another field name."
            )


class WriterStream:
    """One writer's columns and queue over a channel (see the module docstring)."""

    def __init__(self, channel: Any, num_keep_alive_refs: int) -> None:
        self.channel = channel
        self.keep = int(num_keep_alive_refs)
        self.stream = int(channel.call("open_stream", {}, None))
        self.columns: list[_Column] = []
        self.episode_steps = 0
        self.episode = secrets.randbits(62)
        self.runs: list[tuple[tuple, dict[str, Any]]] = []
        self.pending = 0
        self.closed = False

    def configure(self, column: int, num_keep_alive_refs: int) -> None:
        self._column(column).keep = int(num_keep_alive_refs)

    def _column(self, index: int) -> _Column:
        while len(self.columns) <= index:
            self.columns.append(_Column(len(self.columns), self.keep))
        return self.columns[index]

    @property
    def max_num_keep_alive_refs(self) -> int:
        return max([self.keep] + [c.keep for c in self.columns])

    def append(self, flat: list[Any], partial: bool) -> list[CellRef | None]:
        """Appends one (partial) step; ``flat[i]`` is column ``i``'s value or None."""
        if self.closed:
            raise InvalidArgumentError("the writer is closed; create a new one.")
        arrays = [None if v is None else to_array(v) for v in flat]
        if len(self.columns) < len(flat):
            self._column(len(flat) - 1)
        cols = self.columns[: len(flat)]
        for col, value in zip(cols, arrays, strict=True):  # validate every value first
            if value is not None and (value.dtype != col.dtype or value.shape != col.shape):
                col.check(value)
        refs: list[CellRef | None] = []
        full = False
        for col, value in zip(cols, arrays, strict=True):
            if value is None:
                refs.append(None)
                continue
            step = col.next_step
            refs.append(CellRef(col, step, value))
            col.unsent.append(value)
            col.next_step = step + 1
            if step + 1 - col.keep > col.alive_from:
                col.alive_from = step + 1 - col.keep
            full = full or len(col.unsent) >= MAX_UNSENT
        if not partial:
            self.episode_steps += 1
        if full:
            self._send(None)
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
        if self.closed:
            raise InvalidArgumentError("the writer is closed; create a new one.")
        ids, steps = [], []
        for i, refs in enumerate(columns):
            if not refs:
                raise InvalidArgumentError(
                    f"Column {i} of the trajectory is empty; every column needs a reference."
                )
            column = refs[0].owner
            column_steps = []
            for ref in refs:  # one pass: the field of every reference, and its step
                if ref.owner is not column:
                    raise InvalidArgumentError(
                        f"Column {i} of the trajectory mixes references of different appended "
                        "fields; recollect.reverb needs each trajectory column to come from one "
                        "field (slice one history column)."
                    )
                column_steps.append(ref.step)
            if min(column_steps) < column.alive_from:
                raise InvalidArgumentError(
                    f"Error in column {i}: Column contains expired data (references older "
                    f"than num_keep_alive_refs={column.keep} steps). Raise num_keep_alive_refs."
                )
            ids.append(column.index)
            steps.append(column_steps)
        key = (
            table,
            tuple(ids),
            tuple(map(len, steps)),
            tuple(map(bool, squeeze)),
            per_step,
        )
        if not self.runs or self.runs[-1][0] != key:
            self.runs.append((key, {"priorities": [], "episodes": [], "steps": []}))
        run = self.runs[-1][1]
        run["priorities"].append(float(priority))
        run["episodes"].append(self.episode)
        run["steps"].append(steps)
        self.pending += 1
        if self.pending >= MAX_PENDING:
            self._send(None)

    def _groups(self, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` queued items as runs of one layout."""
        groups = []
        for (table, ids, lengths, squeeze, per_step), full in self.runs:
            if limit <= 0:
                break
            run = {k: v[:limit] for k, v in full.items()}
            limit -= len(run["priorities"])
            # a run's items have one layout: their steps are one [n, sum(lengths)] array
            n = len(run["steps"])
            flat = np.fromiter(chain.from_iterable(chain.from_iterable(run["steps"])), np.int64)
            bounds = np.cumsum(lengths)[:-1].tolist()
            steps = np.split(flat.reshape(n, sum(lengths)), bounds, axis=1)
            groups.append(
                {
                    "table": table,
                    "priorities": np.asarray(run["priorities"], np.float64),
                    "episodes": np.asarray(run["episodes"], np.int64),
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
            _, run = self.runs[0]
            n = len(run["priorities"])
            if count >= n:
                self.runs.pop(0)
                count -= n
            else:
                for name in ("priorities", "episodes", "steps"):
                    del run[name][:count]
                count = 0

    def _send(self, timeout: float | None, limit: int | None = None) -> bool:
        """Sends unsent steps and the first ``limit`` (None: all) queued items; True when
        all of those went in."""
        chunks = []
        for col in self.columns:
            if col.unsent:
                chunks.append(
                    {
                        "column": col.index,
                        "first_step": col.sent,
                        "data": np.stack(col.unsent),
                    }
                )
                col.sent += len(col.unsent)
                col.unsent = []
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
