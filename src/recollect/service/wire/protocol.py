"""What a shard offers its clients: the :class:`ShardProtocol` every transport serves.

:class:`~recollect.service.shard.Shard` implements it; a transport (the
in-process :class:`~recollect.service.wire.endpoint.LocalEndpoint`, ``recollect.ray``'s
actor and its Unix-socket chunk channel) carries typed requests
(:mod:`recollect.service.wire.requests`) to it and the results
(:mod:`recollect.service.wire.replies`) back, and knows nothing of leases or ordering.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import numpy as np

from recollect.buffers import Sample
from recollect.service.wire.replies import PriorityUpdates, SampledBatches, ShardDescription
from recollect.table import TableInfo

__all__ = ["ShardProtocol"]


class ShardProtocol(Protocol):
    """One shard of a served table, as its transports reach it (see ``Shard`` for each method)."""

    table: str
    index: int

    def describe(self) -> ShardDescription: ...

    def reserve(self, num_envs: int, host: str, pid: int) -> tuple[int, np.ndarray]: ...

    def release(self, lease_id: int) -> None: ...

    def check_lease(self, lease_id: int) -> None: ...

    def extend(
        self,
        lease_id: int,
        leaves: list[np.ndarray],
        timeout: float | None = None,
        seq: int | None = None,
    ) -> int: ...

    def sampling_weight(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> tuple[float, int]: ...

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Sample, float]: ...

    def sample_batches(
        self,
        sizes: list[int],
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
        updates: PriorityUpdates | None = None,
        client: int | None = None,
    ) -> SampledBatches: ...

    def update_priorities(self, ids: Any, priorities: Any, counts: Any = None) -> int: ...

    def sampling_bounds(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> tuple[float, int, float]: ...

    def weight_normalization(self) -> str | None: ...

    def delete(self, ids: Any) -> int: ...

    def cancel(self, client: int) -> None: ...

    def info(self) -> TableInfo: ...

    def reset(self) -> None: ...

    def save(self, path: str | os.PathLike[str]) -> str: ...
