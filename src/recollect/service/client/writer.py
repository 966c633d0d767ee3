"""Writer: streams one actor's steps to the rows it leased on one shard, in chunks."""

from __future__ import annotations

import collections
import os
import socket
import weakref
from typing import Any

import numpy as np

from recollect.arguments import positive_int
from recollect.errors import InvalidArgumentError, StateError
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint, results
from recollect.specs import FlatSpec
from recollect.validation import convert_step, exact_matcher

__all__ = ["Writer"]


def _release(endpoint: Endpoint, lease_id: int) -> None:
    try:
        endpoint.result(endpoint.send(rq.Release(lease_id)), timeout=5.0)
    except Exception:  # best effort (garbage collection); the shard reclaims
        pass


class Writer:
    """Sends ``add_batch`` steps of ``num_envs`` envs to rows leased on one shard.

    Steps are validated on the caller's side with the local buffer's checks
    (same errors, raised by the call that made them, nothing kept; a step of the
    spec's exact dtypes and shapes takes the local buffer's fast check), copied into
    a client-side chunk of ``chunk_length`` steps per row, and each full chunk
    is sent as one ``extend``: the spec's flat, already-cast leaves, which the
    shard checks (dtypes and shapes) and block-writes as they are. At most
    ``max_in_flight`` chunks are unacknowledged; the next one waits for the oldest
    (backpressure, e.g. from a rate limiter). Steps not yet sent are lost if the
    process dies: :meth:`flush` sends and waits.

    Use it as a context manager, or call :meth:`close`, which flushes and
    releases the rows (their next writer starts a new episode on them).

    Created by :meth:`Client.writer <recollect.service.Client.writer>`.

    Attributes:
        table: the table's name.
        shard: the shard the rows are on.
        rows: int64 ``[num_envs]`` the leased rows of that shard.
        lease_id: the shard's id of this writer's lease (what each ``extend`` names).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        data_spec: Any,
        num_envs: int,
        *,
        chunk_length: int = 64,
        max_in_flight: int = 4,
        timeout: float | None = None,
    ) -> None:
        chunk_length = positive_int("chunk_length", chunk_length)
        max_in_flight = positive_int("max_in_flight", max_in_flight)
        self._endpoint = endpoint
        self._flat = FlatSpec(data_spec)
        self.table = endpoint.table
        self.shard = endpoint.shard
        self.num_envs = num_envs
        self.chunk_length = chunk_length
        self.max_in_flight = max_in_flight
        self.timeout = timeout
        lease = endpoint.result(
            endpoint.send(rq.Reserve(num_envs, socket.gethostname(), os.getpid()))
        )
        self.lease_id, self.rows = lease
        self._in_flight: collections.deque[Any] = collections.deque()
        self._sent = 0  # chunks sent: the next one's number (the shard stores them in order)
        # the common step (exact dtypes and shapes) checked by one generated expression
        self._match = exact_matcher(self._flat, (num_envs,))
        self._match_one = exact_matcher(self._flat, ()) if num_envs == 1 else None
        # the steps added and not yet sent, time-major: [chunk_length, num_envs, *leaf shape]
        # per leaf, so a step is one ``chunk[pos] = leaf`` per leaf (a third cheaper than
        # ``[:, pos]``); :meth:`_send` copies them out row-major and refills this buffer
        self._chunk = [
            np.empty((chunk_length, num_envs, *s.shape), s.dtype) for s in self._flat.leaves
        ]
        self._pos = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, _release, endpoint, self.lease_id)

    @property
    def flat_spec(self) -> FlatSpec:
        """The table's flattened spec (what an :class:`~recollect.Observer` feeds)."""
        return self._flat

    @property
    def pending(self) -> int:
        """Steps per row added but not yet sent."""
        return self._pos

    @property
    def in_flight(self) -> int:
        """Chunks sent and not yet acknowledged."""
        return len(self._in_flight)

    def add_batch(self, steps: Any) -> None:
        """Adds one step of each env (leaves ``[num_envs, *shape]``) as ``ReplayBuffer.add_batch``.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: as a local buffer's
                ``add_batch``; nothing is kept.
            StateError: the writer is closed, or its lease was lost.
            RateLimiterTimeout, ShardUnavailableError: from a chunk sent earlier.
        """
        if self._closed:
            raise StateError("this Writer is closed; open a new one with client.writer(...).")
        leaves = self._match(steps)
        if leaves is None:  # anything unusual: the full check (casts, or the error)
            leaves = convert_step(self._flat, steps, (self.num_envs,), "add_batch", "writer")
        pos = self._pos
        for chunk, leaf in zip(self._chunk, leaves):  # noqa: B905 (one leaf per chunk array)
            chunk[pos] = leaf
        self._pos = pos + 1
        if self._pos == self.chunk_length:
            self._send()

    def add(self, step: Any) -> None:
        """Adds one step (no env dim) of a writer with ``num_envs == 1``, as ``ReplayBuffer.add``.

        Raises:
            InvalidArgumentError: the writer has several envs.
            SpecError, ShapeError, DTypeError, CastError: as ``ReplayBuffer.add``.
        """
        if self.num_envs != 1:
            raise InvalidArgumentError(
                f"`add` takes one step and works only when num_envs == 1; this writer has "
                f"num_envs={self.num_envs}. Use add_batch with leaves of leading dim "
                f"{self.num_envs}."
            )
        if self._closed:
            raise StateError("this Writer is closed; open a new one with client.writer(...).")
        leaves = None if self._match_one is None else self._match_one(step)
        if leaves is None:
            leaves = convert_step(self._flat, step, (), "add", "writer")
        pos = self._pos
        for chunk, leaf in zip(self._chunk, leaves):  # noqa: B905 (one leaf per chunk array)
            chunk[pos, 0] = leaf
        self._pos = pos + 1
        if self._pos == self.chunk_length:
            self._send()

    def _send(self) -> None:
        pos = self._pos
        if not pos:
            return
        # [num_envs, steps, *leaf shape] per leaf: new arrays, the shard's to keep (no
        # unflatten); the time-major buffer is refilled from step 0
        leaves = [chunk[:pos].swapaxes(0, 1).copy() for chunk in self._chunk]
        self._pos = 0
        while len(self._in_flight) >= self.max_in_flight:
            self._endpoint.result(self._in_flight.popleft())
        handle = self._endpoint.send(rq.Extend(self.lease_id, leaves, self.timeout, self._sent))
        self._sent += 1
        self._in_flight.append(handle)

    def flush(self, timeout: float | None = None) -> None:
        """Sends the steps added so far and waits until the shard stored all of them.

        Args:
            timeout: seconds to wait for the acknowledgements (None: no limit).

        Raises:
            RateLimiterTimeout, ShardUnavailableError, StateError: as the chunks met them.
        """
        self._send()
        handles, self._in_flight = list(self._in_flight), collections.deque()
        results([(self._endpoint, handle) for handle in handles], timeout)

    def close(self) -> None:
        """Flushes, then releases the rows (idempotent)."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._finalizer.detach()
            _release(self._endpoint, self.lease_id)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Writer(table={self.table!r}, shard={self.shard}, rows={self.rows.tolist()}, "
            f"pending={self._pos}, in_flight={len(self._in_flight)})"
        )
