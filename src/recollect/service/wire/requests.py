"""The requests a client sends a shard: one frozen dataclass per :class:`ShardProtocol` method.

A transport pickles a request, delivers it, and the receiving side calls
:meth:`Request.apply` on its shard; no method is looked up by name. A request
of an ordered stream (a writer's chunks, :attr:`Request.stream`) may go over a
connection of its own; :meth:`Request.stream_lost` names the request that
tells why such a connection broke (the shard's own error, if any).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from recollect.service.wire.replies import PriorityUpdates, SampledBatches, ShardDescription
from recollect.table import TableInfo

if TYPE_CHECKING:
    from recollect.buffers import Sample
    from recollect.service.wire.protocol import ShardProtocol

__all__ = [
    "Cancel",
    "CheckLease",
    "Delete",
    "Describe",
    "Extend",
    "Info",
    "Release",
    "Request",
    "Reserve",
    "Reset",
    "SampleBatches",
    "SampleWindows",
    "SamplingBounds",
    "SamplingWeight",
    "Save",
    "UpdatePriorities",
    "WeightNormalization",
]

T = TypeVar("T")


class Request(Generic[T]):
    """A call of one shard method with its arguments; :meth:`apply` makes it."""

    def apply(self, shard: ShardProtocol) -> T:
        """Calls the shard method this request names; returns its result."""
        raise NotImplementedError

    @property
    def stream(self) -> int | None:
        """The ordered stream this request belongs to (a writer's chunks), or None."""
        return None

    @property
    def ends_stream(self) -> int | None:
        """The stream this request ends (a released lease), or None."""
        return None

    @property
    def numbered(self) -> bool:
        """True when the shard stores this stream request in the order of its number,
        whatever carried it (so the stream may move from one transport to another)."""
        return False

    def stream_lost(self) -> Request[Any] | None:
        """The request whose answer says why this request's stream connection broke."""
        return None


@dataclasses.dataclass(frozen=True)
class Describe(Request[ShardDescription]):
    def apply(self, shard: ShardProtocol) -> ShardDescription:
        return shard.describe()


@dataclasses.dataclass(frozen=True)
class Reserve(Request[tuple[int, np.ndarray]]):
    num_envs: int
    host: str
    pid: int

    def apply(self, shard: ShardProtocol) -> tuple[int, np.ndarray]:
        return shard.reserve(self.num_envs, self.host, self.pid)


@dataclasses.dataclass(frozen=True)
class Release(Request[None]):
    lease_id: int

    def apply(self, shard: ShardProtocol) -> None:
        shard.release(self.lease_id)

    @property
    def ends_stream(self) -> int | None:
        return self.lease_id


@dataclasses.dataclass(frozen=True)
class CheckLease(Request[None]):
    lease_id: int

    def apply(self, shard: ShardProtocol) -> None:
        shard.check_lease(self.lease_id)


@dataclasses.dataclass(frozen=True)
class Extend(Request[int]):
    """A writer's chunk: its flat, already-cast ``leaves`` (one array ``[k, T, *shape]`` per
    leaf of the spec, in its flat order); ``seq`` its number in the lease (the shard stores
    them in order)."""

    lease_id: int
    leaves: list[np.ndarray]
    timeout: float | None = None
    seq: int | None = None

    def apply(self, shard: ShardProtocol) -> int:
        return shard.extend(self.lease_id, self.leaves, self.timeout, self.seq)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled as its fields in order (no field names): the per-chunk message stays small
        return (Extend, (self.lease_id, self.leaves, self.timeout, self.seq))

    @property
    def stream(self) -> int | None:
        return self.lease_id

    @property
    def numbered(self) -> bool:
        return self.seq is not None

    def stream_lost(self) -> Request[Any] | None:
        return CheckLease(self.lease_id)


@dataclasses.dataclass(frozen=True)
class SamplingWeight(Request[tuple[float, int]]):
    num_steps: int | None = None
    updates: PriorityUpdates | None = None

    def apply(self, shard: ShardProtocol) -> tuple[float, int]:
        return shard.sampling_weight(self.num_steps, self.updates)


@dataclasses.dataclass(frozen=True)
class SampleWindows(Request["tuple[Sample, float]"]):
    batch_size: int
    num_steps: int | None = None
    timeout: float | None = None
    options: dict[str, Any] | None = None

    def apply(self, shard: ShardProtocol) -> tuple[Sample, float]:
        return shard.sample(self.batch_size, self.num_steps, self.timeout, self.options)


@dataclasses.dataclass(frozen=True)
class SampleBatches(Request[SampledBatches]):
    sizes: list[int]
    num_steps: int | None = None
    timeout: float | None = None
    options: dict[str, Any] | None = None
    updates: PriorityUpdates | None = None
    client: int | None = None

    def apply(self, shard: ShardProtocol) -> SampledBatches:
        return shard.sample_batches(
            self.sizes, self.num_steps, self.timeout, self.options, self.updates, self.client
        )


@dataclasses.dataclass(frozen=True)
class UpdatePriorities(Request[int]):
    ids: Any
    priorities: Any
    counts: Any = None

    def apply(self, shard: ShardProtocol) -> int:
        return shard.update_priorities(self.ids, self.priorities, self.counts)


@dataclasses.dataclass(frozen=True)
class SamplingBounds(Request[tuple[float, int, float]]):
    num_steps: int | None = None
    updates: PriorityUpdates | None = None

    def apply(self, shard: ShardProtocol) -> tuple[float, int, float]:
        return shard.sampling_bounds(self.num_steps, self.updates)


@dataclasses.dataclass(frozen=True)
class WeightNormalization(Request["str | None"]):
    def apply(self, shard: ShardProtocol) -> str | None:
        return shard.weight_normalization()


@dataclasses.dataclass(frozen=True)
class Delete(Request[int]):
    ids: Any

    def apply(self, shard: ShardProtocol) -> int:
        return shard.delete(self.ids)


@dataclasses.dataclass(frozen=True)
class Cancel(Request[None]):
    client: int

    def apply(self, shard: ShardProtocol) -> None:
        shard.cancel(self.client)


@dataclasses.dataclass(frozen=True)
class Info(Request[TableInfo]):
    def apply(self, shard: ShardProtocol) -> TableInfo:
        return shard.info()


@dataclasses.dataclass(frozen=True)
class Reset(Request[None]):
    def apply(self, shard: ShardProtocol) -> None:
        shard.reset()


@dataclasses.dataclass(frozen=True)
class Save(Request[str]):
    path: str | os.PathLike[str]

    def apply(self, shard: ShardProtocol) -> str:
        return shard.save(self.path)
