"""How a client reaches a shard: the :class:`Endpoint` interface and the in-process one.

A shard operation is described once, by its typed request
(:mod:`recollect.service.wire.requests`: ``rq.Extend(lease, steps, timeout, seq)``,
``rq.SampleBatches(...)``, ...), and implemented once, by the shard's method of the
same name (:class:`~recollect.service.wire.protocol.ShardProtocol`). An endpoint only
delivers requests: :meth:`Endpoint.send` starts one and returns a handle, and
:meth:`Endpoint.result` gives the shard's return value, so several requests (chunks of
a writer, parts of a split sample) can be in flight at once. The in-process endpoint
applies a request at once; ``recollect.ray``'s sends it to a Ray actor (or over its
chunk socket). Both raise the shard's own exception on the caller's side, so a bad
request fails over a client with the same error type and message as on a local buffer.
:func:`results` waits for several calls (of any endpoints) under one deadline.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any, Protocol

from recollect.service.wire import requests as rq
from recollect.service.wire.protocol import ShardProtocol

__all__ = ["Endpoint", "LocalEndpoint", "Raised", "results"]


@dataclasses.dataclass(frozen=True)
class Raised:
    """An exception a shard raised, carried back as a value (Ray would wrap it otherwise)."""

    error: BaseException


class Endpoint(Protocol):
    """A shard as a client sees it: requests in (:meth:`send`), results out (:meth:`result`).

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
        """The call's return value, waiting up to ``timeout`` seconds (None: no limit;
        0: only a finished call answers); raises what the shard raised.

        Raises:
            ShardNoAnswerError (a ShardUnavailableError): ``timeout`` passed first; the
                call may still finish and ``result`` can be asked again.
            ShardUnavailableError: the shard is dead or unreachable.
        """
        ...


def results(calls: Iterable[tuple[Endpoint, Any]], timeout: float | None = None) -> list[Any]:
    """The return values of several ``(endpoint, handle)`` calls, in order, all waited for
    under one deadline ``timeout`` seconds away (None: no limit).

    The calls run at once; waiting for them in order costs the slowest one's time.

    Raises:
        What :meth:`Endpoint.result` raises, for the first call (in order) that raised;
        ShardNoAnswerError when the deadline passed first.
    """
    if timeout is None:
        return [endpoint.result(handle) for endpoint, handle in calls]
    deadline = time.monotonic() + timeout
    return [
        endpoint.result(handle, max(deadline - time.monotonic(), 0.0)) for endpoint, handle in calls
    ]


class LocalEndpoint:
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
