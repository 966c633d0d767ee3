"""Priority updates a client holds back, and the updates it sent and has not settled.

``Client.update_priorities`` without ``wait`` holds each shard's updates back
(:meth:`HeldUpdates.hold`); they go to their shard along with the client's next
sample request of the table (:meth:`HeldUpdates.take`), or on their own once a
shard has enough waiting or the oldest waited long enough. Updates sent on
their own are settled later (:meth:`HeldUpdates.settle_done`, :meth:`HeldUpdates.drain`),
so a shard's error comes back from a later call. Thread-safe.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from recollect.errors import ShardNoAnswerError
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint, results
from recollect.service.wire.replies import PriorityUpdates

__all__ = ["HeldUpdates"]

#: sent updates a table keeps unsettled at most (the oldest are settled beyond it)
MAX_UNSETTLED = 64


class HeldUpdates:
    """The held-back and the unsettled priority updates of one client, per table and shard."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # held back: {table: {shard: [(ids, priorities)]}}, their sizes, the oldest's age
        self._held: dict[str, dict[int, list[tuple[np.ndarray, np.ndarray]]]] = (
            collections.defaultdict(dict)
        )
        self._size: dict[tuple[str, int], int] = {}
        self._since: dict[str, float] = {}
        # sent on their own, not settled: {table: deque of (endpoint, handle)}
        self._sent: dict[str, collections.deque[tuple[Endpoint, Any]]] = collections.defaultdict(
            collections.deque
        )

    def tables(self) -> list[str]:
        """Tables with updates held back or unsettled."""
        with self._lock:
            return list(set(self._sent) | set(self._held))

    def shards_held(self, table: str) -> list[int]:
        """Shards of ``table`` with updates held back."""
        with self._lock:
            return list(self._held.get(table, ()))

    def hold(
        self,
        table: str,
        routed: list[tuple[int, np.ndarray, np.ndarray]],
        max_unsent: int,
        max_delay_s: float,
    ) -> list[int]:
        """Holds back ``[(shard, ids, priorities)]``; returns the shards whose updates are
        due: ``max_unsent`` ids waiting, or the oldest waited ``max_delay_s`` seconds."""
        now = time.monotonic()
        with self._lock:
            held = self._held[table]
            for s, i, p in routed:
                if not len(i):
                    continue
                held.setdefault(s, []).append((i, p))
                self._size[table, s] = self._size.get((table, s), 0) + len(i)
            self._since.setdefault(table, now)
            due = now - self._since[table] >= max_delay_s
            return [s for s in list(held) if due or self._size[table, s] >= max_unsent]

    def take(self, table: str, shard: int) -> PriorityUpdates | None:
        """The held-back updates of ``table``'s shard ``shard``, concatenated, with the
        length of each call (:data:`~recollect.service.wire.replies.PriorityUpdates`; None:
        none); they are no longer held."""
        with self._lock:
            held = self._held.get(table)
            parts = held.pop(shard, None) if held else None
            if not parts:
                return None
            self._size.pop((table, shard), None)
            if not held:
                self._since.pop(table, None)
        if len(parts) == 1:
            return parts[0]
        return (
            np.concatenate([i for i, _ in parts]),
            np.concatenate([p for _, p in parts]),
            np.array([len(i) for i, _ in parts], np.int64),
        )

    def apply_now(
        self,
        table: str,
        endpoints: Sequence[Endpoint],
        routed: list[tuple[int, np.ndarray, np.ndarray]],
    ) -> int:
        """Sends ``table``'s held-back updates, waits until applied, then applies
        ``[(shard, ids, priorities)]`` and returns the ids they skipped."""
        held = [(s, self.take(table, s)) for s in range(len(endpoints))]
        earlier = [(endpoints[s], endpoints[s].send(rq.UpdatePriorities(*u))) for s, u in held if u]
        results(earlier)
        handles = [
            (endpoints[s], endpoints[s].send(rq.UpdatePriorities(i, p))) for s, i, p in routed
        ]
        return sum(int(skipped) for skipped in results(handles))

    def send(self, table: str, shard: int, endpoint: Endpoint) -> None:
        """Sends the held-back updates of ``table``'s shard ``shard`` on their own (not
        waited for: :meth:`settle_done` or :meth:`drain` settle them)."""
        updates = self.take(table, shard)
        if updates is not None:
            self.sent(table, endpoint, endpoint.send(rq.UpdatePriorities(*updates)))

    def sent(self, table: str, endpoint: Endpoint, handle: Any) -> None:
        """Keeps the handle of updates sent on their own; settles the oldest beyond
        :data:`MAX_UNSETTLED` (raises what their shard raised)."""
        with self._lock:
            pending = self._sent[table]
            pending.append((endpoint, handle))
            oldest = [pending.popleft() for _ in range(max(len(pending) - MAX_UNSETTLED, 0))]
        for e, h in oldest:
            e.result(h)

    def settle_done(self, table: str) -> None:
        """Settles the sent updates of ``table`` that finished, oldest first; raises the
        first error a shard raised for them."""
        while True:
            with self._lock:
                pending = self._sent.get(table)
                if not pending:
                    return
                endpoint, handle = pending[0]
                try:
                    endpoint.result(handle, 0.0)
                except ShardNoAnswerError:
                    return  # not finished: it stays the oldest
                except BaseException:
                    pending.popleft()  # settled: its error is raised
                    raise
                pending.popleft()

    def drain(self, table: str) -> None:
        """Waits for every sent update of ``table``; raises what a shard raised."""
        with self._lock:
            pending = self._sent.get(table)
            handles = list(pending or ())
            if pending:
                pending.clear()
        results(handles)
