"""How a client reaches a shard: the :class:`Endpoint` protocol and the in-process one.

A client submits a shard method by name and later asks for its result, so
several requests (chunks of a writer, parts of a split sample) can be in flight
at once. The in-process endpoint runs the call at once; ``recollect.ray``'s
endpoint sends it to a Ray actor. Both raise the shard's own exception on the
caller's side, so a bad request fails over a client with the same error type
and message as on a local buffer.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from recollect.service.shard import Shard

__all__ = ["Endpoint", "LocalEndpoint", "Raised"]


@dataclasses.dataclass(frozen=True)
class Raised:
    """An exception a shard raised, carried back as a value (Ray would wrap it otherwise)."""

    error: BaseException


class Endpoint(Protocol):
    """A shard as a client sees it.

    Attributes:
        table: the table's name.
        shard: the shard index.
    """

    table: str
    shard: int

    def submit(self, method: str, *args: Any) -> Any:
        """Starts ``Shard.<method>(*args)``; returns a handle for :meth:`result`."""
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


class LocalEndpoint:
    """An in-process shard: :meth:`submit` runs the call in the caller's thread.

    Args:
        shard: the :class:`Shard`.
    """

    def __init__(self, shard: Shard) -> None:
        self.shard_object = shard
        self.table = shard.table
        self.shard = shard.index

    def submit(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.shard_object, method)(*args)
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
