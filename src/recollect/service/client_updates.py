"""Changes a learner makes to a served table's windows through the :class:`Client
<recollect.service.Client>`: priority updates (held back and batched per shard) and
deletes, each id routed to the shard encoded in it, and ``flush`` of what was held back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.samplers.prioritized import check_update
from recollect.service.routing import route

if TYPE_CHECKING:
    from recollect.service.endpoint import Endpoint
    from recollect.service.priority_updates import HeldUpdates
    from recollect.service.replies import ShardDescription

__all__ = ["ClientUpdates"]


class ClientUpdates:
    """``update_priorities``, ``delete`` and ``flush`` of :class:`~recollect.service.Client`
    (a mixin)."""

    #: ids per shard a client holds back before it sends them on their own
    max_unsent_updates: int = 4096
    #: seconds after which held-back updates go out with the next ``update_priorities``
    max_update_delay_s: float = 0.05

    _held: HeldUpdates
    _id_base: dict[str, int]

    if TYPE_CHECKING:  # defined by Client

        def _endpoints(self, table: str) -> list[Endpoint]: ...

        def describe(self, table: str) -> ShardDescription: ...

    def update_priorities(
        self, table: str, ids: Any, priorities: Any, *, wait: bool = False
    ) -> int | None:
        """Sets priorities of ``table``'s windows; each id goes to the shard encoded in it.

        Ids that name no shard of ``table`` are skipped, as a local buffer skips
        ids of another shard: ids of another table of the service (each table's
        ids carry its own shard numbers, see :mod:`recollect.ids`), negative ids.

        Without ``wait``, updates are held back on the client and go to their
        shard along with this client's next sample request of the table (applied
        before its draw), or on their own once a shard has
        :attr:`max_unsent_updates` ids waiting or the oldest waited
        :attr:`max_update_delay_s` seconds (checked by each call), or by
        :meth:`flush` and :meth:`close`: one request carries many updates.

        Args:
            table: the table's name.
            ids: int64 ``[B]`` sample ids.
            priorities: float ``[B]`` new priorities.
            wait: send now, after every update of the table held back, and
                block until the shards applied them; then return the ids
                skipped (of these ids). Otherwise return None
                at once; an error a shard raises is raised by a later ``sample``
                or ``update_priorities`` of this table (or :meth:`flush`).

        Raises:
            InvalidArgumentError: as ``ReplayBuffer.update_priorities`` (same
                message): the sampler has no priorities, ``ids`` and
                ``priorities`` are not 1-D of one length, ids are not integers,
                a priority is NaN, inf or negative. Checked by this call, also
                when the update is held back, so a bad call never takes another
                call's update down with it.
        """
        endpoints = self._endpoints(table)
        self._held.settle_done(table)
        if not self.describe(table).priorities:  # the shard raises as a local buffer
            endpoint = endpoints[0]
            return endpoint.result(endpoint.update_priorities(ids, priorities))
        # a local buffer's checks and messages, made by this call for this call
        ids, priorities, _ = check_update(ids, priorities)
        # each id to its shard; ids of no shard of this table (another table's, negative)
        # are skipped, as a local buffer skips ids of another shard
        routed = route(ids, priorities, self._id_base[table], len(endpoints))
        if wait:  # held-back updates first, applied before these (their skips not counted)
            skipped = self._held.apply_now(table, endpoints, routed)
            return skipped + int(len(ids) - sum(len(i) for _, i, _ in routed))
        due = self._held.hold(table, routed, self.max_unsent_updates, self.max_update_delay_s)
        for s in due:
            self._held.send(table, s, endpoints[s])
        return None

    def delete(self, table: str, ids: Any) -> int:
        """Deletes ``table``'s windows starting at ``ids`` (``ReplayBuffer.delete``; Reverb:
        ``mutate_priorities`` deletes); each id goes to the shard encoded in it. Priority
        updates held back for the table are sent first (applied before the deletes).

        Args:
            table: the table's name.
            ids: int64 ``[K]`` sample ids.

        Returns:
            The number of ids skipped: overwritten, unknown, of no shard of this
            table, or deleted already (as :meth:`update_priorities` counts them).

        Raises:
            InvalidArgumentError: ``ids`` is not 1-D integers; nothing is deleted.
        """
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
        handles = [(endpoints[s], endpoints[s].delete(i)) for s, i, _ in routed]
        skipped = sum(int(e.result(h)) for e, h in handles)
        return skipped + int(len(ids) - sum(len(i) for _, i, _ in routed))

    def flush(self, table: str | None = None) -> None:
        """Sends the held-back priority updates of ``table`` (None: every table) and waits
        for all its asynchronous ones.

        Raises:
            What a shard raised for one of them.
        """
        for name in [table] if table is not None else self._held.tables():
            endpoints = self._endpoints(name)
            for shard in self._held.shards_held(name):
                self._held.send(name, shard, endpoints[shard])
            self._held.drain(name)
