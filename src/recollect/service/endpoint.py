"""How a client reaches a shard: the :class:`Endpoint` interface and the in-process one.

An endpoint offers each :class:`~recollect.service.protocol.ShardProtocol`
method by name in code (``endpoint.extend(...)``, ``endpoint.sample_batches(...)``),
each returning a handle whose :meth:`Endpoint.result` is the shard's return
value, so several requests (chunks of a writer, parts of a split sample) can be
in flight at once. :class:`ShardCalls` builds these methods on one transport
method, :meth:`ShardCalls.send`, which delivers a typed request
(:mod:`recollect.service.requests`): the in-process endpoint applies it at
once; ``recollect.ray``'s endpoint sends it to a Ray actor. Both raise the
shard's own exception on the caller's side, so a bad request fails over a
client with the same error type and message as on a local buffer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from typing import Any, Protocol

from recollect.service import requests as rq
from recollect.service.protocol import ShardProtocol
from recollect.service.replies import PriorityUpdates

__all__ = ["Endpoint", "LocalEndpoint", "Raised", "ShardCalls", "cancel_everywhere", "gather"]


@dataclasses.dataclass(frozen=True)
class Raised:
    """An exception a shard raised, carried back as a value (Ray would wrap it otherwise)."""

    error: BaseException


class Endpoint(Protocol):
    """A shard as a client sees it: one method per shard method, each returning a handle.

    Attributes:
        table: the table's name.
        shard: the shard index.
    """

    table: str
    shard: int

    def send(self, request: rq.Request[Any]) -> Any:
        """Starts ``request`` on the shard; returns a handle for :meth:`result`."""
        ...

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        """The call's return value; raises what the shard raised.

        Raises:
            ShardUnavailableError: the shard is dead or unreachable.
        """
        ...

    def wait(self, handles: list[Any], timeout: float | None = None) -> None:
        """Waits until every call of ``handles`` (of any endpoint of this kind) finished,
        or ``timeout`` seconds passed; raises nothing (:meth:`result` does)."""
        ...

    def done(self, handle: Any) -> bool:
        """Whether the call finished (its :meth:`result` would not wait)."""
        ...

    def describe(self) -> Any: ...

    def reserve(self, num_envs: int, host: str, pid: int) -> Any: ...

    def release(self, lease_id: int) -> Any: ...

    def check_lease(self, lease_id: int) -> Any: ...

    def extend(
        self, lease_id: int, steps: Any, timeout: float | None = None, seq: int | None = None
    ) -> Any: ...

    def sampling_weight(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> Any: ...

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> Any: ...

    def sample_batches(
        self,
        sizes: list[int],
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
        updates: PriorityUpdates | None = None,
        client: int | None = None,
    ) -> Any: ...

    def update_priorities(self, ids: Any, priorities: Any, counts: Any = None) -> Any: ...

    def sampling_bounds(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> Any: ...

    def weight_normalization(self) -> Any: ...

    def delete(self, ids: Any) -> Any: ...

    def cancel(self, client: int) -> Any: ...

    def info(self) -> Any: ...

    def reset(self) -> Any: ...

    def save(self, path: str | os.PathLike[str]) -> Any: ...


class ShardCalls:
    """The shard methods of an :class:`Endpoint`, each a typed request given to :meth:`send`.

    A transport subclasses it and implements :meth:`send`, :meth:`result`,
    :meth:`wait` and :meth:`done`; each method here returns :meth:`send`'s handle.
    """

    def send(self, request: rq.Request[Any]) -> Any:
        raise NotImplementedError

    def describe(self) -> Any:
        return self.send(rq.Describe())

    def reserve(self, num_envs: int, host: str, pid: int) -> Any:
        return self.send(rq.Reserve(num_envs, host, pid))

    def release(self, lease_id: int) -> Any:
        return self.send(rq.Release(lease_id))

    def check_lease(self, lease_id: int) -> Any:
        return self.send(rq.CheckLease(lease_id))

    def extend(
        self, lease_id: int, steps: Any, timeout: float | None = None, seq: int | None = None
    ) -> Any:
        return self.send(rq.Extend(lease_id, steps, timeout, seq))

    def sampling_weight(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> Any:
        return self.send(rq.SamplingWeight(num_steps, updates))

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
    ) -> Any:
        return self.send(rq.SampleWindows(batch_size, num_steps, timeout, options))

    def sample_batches(
        self,
        sizes: list[int],
        num_steps: int | None = None,
        timeout: float | None = None,
        options: dict[str, Any] | None = None,
        updates: PriorityUpdates | None = None,
        client: int | None = None,
    ) -> Any:
        return self.send(rq.SampleBatches(sizes, num_steps, timeout, options, updates, client))

    def update_priorities(self, ids: Any, priorities: Any, counts: Any = None) -> Any:
        return self.send(rq.UpdatePriorities(ids, priorities, counts))

    def sampling_bounds(
        self, num_steps: int | None = None, updates: PriorityUpdates | None = None
    ) -> Any:
        return self.send(rq.SamplingBounds(num_steps, updates))

    def weight_normalization(self) -> Any:
        return self.send(rq.WeightNormalization())

    def delete(self, ids: Any) -> Any:
        return self.send(rq.Delete(ids))

    def cancel(self, client: int) -> Any:
        return self.send(rq.Cancel(client))

    def info(self) -> Any:
        return self.send(rq.Info())

    def reset(self) -> Any:
        return self.send(rq.Reset())

    def save(self, path: str | os.PathLike[str]) -> Any:
        return self.send(rq.Save(path))


class LocalEndpoint(ShardCalls):
    """An in-process shard: :meth:`send` applies the request in the caller's thread.

    Args:
        shard: the :class:`~recollect.service.shard.Shard`.
    """

    def __init__(self, shard: ShardProtocol) -> None:
        self.shard_object = shard
        self.table = shard.table
        self.shard = shard.index

    def send(self, request: rq.Request[Any]) -> Any:
        try:
            return request.apply(self.shard_object)
        except Exception as err:  # raised again by result(), on the caller's side
            return Raised(err)

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        if type(handle) is Raised:
            raise handle.error
        return handle

    def wait(self, handles: list[Any], timeout: float | None = None) -> None:
        return None

    def done(self, handle: Any) -> bool:
        return True


def gather(endpoints: Sequence[Endpoint], handles: list[Any], timeout: float | None) -> list[Any]:
    """Results of one handle per endpoint, waited for together when the endpoints allow."""
    if len(handles) > 1 and all(type(e) is type(endpoints[0]) for e in endpoints):
        endpoints[0].wait(handles, timeout)
    return [e.result(h, timeout) for e, h in zip(endpoints, handles, strict=True)]


def cancel_everywhere(endpoints: Sequence[Endpoint], client: int) -> None:
    """Tells every shard of ``endpoints`` that ``client`` is closed (``Shard.cancel``),
    waiting up to 5 s for each; raises nothing (a dead shard has no request left to end)."""
    calls = []
    for endpoint in endpoints:
        with contextlib.suppress(Exception):
            calls.append((endpoint, endpoint.cancel(client)))
    for endpoint, handle in calls:
        with contextlib.suppress(Exception):
            endpoint.result(handle, 5.0)
