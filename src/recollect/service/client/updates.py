"""Changes a learner makes to a served table's windows through the :class:`Client
<recollect.service.Client>`: priority updates (held back and batched per shard) and
deletes, each id routed to the shard encoded in it, and ``flush`` of what was held back.
:class:`ClientUpdates` is a collaborator the client holds; the client's methods of the
same names document the behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.samplers.prioritized import check_update
from recollect.service.client.held_updates import HeldUpdates
from recollect.service.client.routing import route
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint
from recollect.service.wire.replies import ShardDescription

__all__ = ["ClientUpdates"]


class ClientUpdates:
    """Routes a client's priority updates and deletes to the shards their ids name.

    Args:
        endpoints: the client's ``table -> [Endpoint per shard]`` lookup (raises for a
            closed client or an unknown table).
        describe: the client's ``table -> ShardDescription`` lookup (cached there).
        held: the client's held-back updates (its sample requests carry them too).
        id_base: per table, the first shard number of its ids (:mod:`recollect.ids`).
    """

    def __init__(
        self,
        endpoints: Callable[[str], list[Endpoint]],
        describe: Callable[[str], ShardDescription],
        held: HeldUpdates,
        id_base: Mapping[str, int],
    ) -> None:
        self._endpoints = endpoints
        self._describe = describe
        self._held = held
        self._id_base = id_base

    def update_priorities(
        self,
        table: str,
        ids: Any,
        priorities: Any,
        *,
        wait: bool,
        max_unsent: int,
        max_delay_s: float,
    ) -> int | None:
        """``Client.update_priorities``: held back per shard up to ``max_unsent`` ids or
        ``max_delay_s`` seconds unless ``wait``; returns the ids skipped when ``wait``."""
        endpoints = self._endpoints(table)
        self._held.settle_done(table)
        if not self._describe(table).priorities:  # the shard raises as a local buffer
            endpoint = endpoints[0]
            return endpoint.result(endpoint.send(rq.UpdatePriorities(ids, priorities)))
        # a local buffer's checks and messages, made by this call for this call
        ids, priorities, _ = check_update(ids, priorities)
        # each id to its shard; ids of no shard of this table (another table's, negative)
        # are skipped, as a local buffer skips ids of another shard
        routed = route(ids, priorities, self._id_base[table], len(endpoints))
        if wait:  # held-back updates first, applied before these (their skips not counted)
            skipped = self._held.apply_now(table, endpoints, routed)
            return skipped + int(len(ids) - sum(len(i) for _, i, _ in routed))
        due = self._held.hold(table, routed, max_unsent, max_delay_s)
        for s in due:
            self._held.send(table, s, endpoints[s])
        return None

    def delete(self, table: str, ids: Any) -> int:
        """``Client.delete``: held-back updates of ``table`` first; returns the ids skipped."""
        endpoints = self._endpoints(table)
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise InvalidArgumentError(
                f"delete needs 1-D integer ids (Sample.ids); got shape {ids.shape}, dtype "
                f"{ids.dtype}."
            )
        self.flush(table)
        ids = ids.astype(np.int64, copy=False)
        routed = route(ids, np.zeros(len(ids)), self._id_base[table], len(endpoints))
        handles = [(endpoints[s], endpoints[s].send(rq.Delete(i))) for s, i, _ in routed]
        skipped = sum(int(e.result(h)) for e, h in handles)
        return skipped + int(len(ids) - sum(len(i) for _, i, _ in routed))

    def flush(self, table: str | None = None) -> None:
        """``Client.flush``: sends ``table``'s (None: every table's) held-back updates."""
        for name in [table] if table is not None else self._held.tables():
            endpoints = self._endpoints(name)
            for shard in self._held.shards_held(name):
                self._held.send(name, shard, endpoints[shard])
            self._held.drain(name)
