"""The Ray actor hosting one shard, and the endpoint through which a client reaches it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
from typing import Any

import ray
from ray import exceptions as ray_errors

from recollect.buffers import ReplayBuffer
from recollect.errors import ShardUnavailableError
from recollect.service.endpoint import Raised
from recollect.service.shard import open_shard

__all__ = ["RayEndpoint", "ShardActor"]

#: Ray namespace of every recollect actor (names: "<service>", "<service>/<table>/<k>")
NAMESPACE = "recollect"


class ShardActor:
    """One shard in a Ray actor process (asynchronous: calls never wait for each other).

    Calls that may wait on the rate limiter run on a thread pool, so a blocked
    insert or sample never blocks the actor's other calls; the rest run on the
    actor's event loop. Exceptions come back as :class:`Raised` values, so the
    client raises the shard's own error (type and message).

    Args:
        table: the table's name.
        config: ``ReplayBuffer.config()`` of this shard (``shard`` set).
        checkpoint_dir: where the shard restores from (on a restart too) and
            keeps its insert counters, or None.
        lease_timeout: as :class:`~recollect.service.Server`.
    """

    def __init__(
        self,
        table: str,
        config: dict[str, Any],
        checkpoint_dir: str | None,
        lease_timeout: float,
    ) -> None:
        buffer = ReplayBuffer.from_config(config)
        self.shard = open_shard(
            table, buffer, checkpoint_dir=checkpoint_dir, lease_timeout=lease_timeout
        )
        self._pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="shard-wait")

    async def call(self, method: str, args: tuple) -> Any:
        """``Shard.<method>(*args)``; an exception is returned as :class:`Raised`."""
        shard = self.shard
        try:
            if shard.may_block(method):
                loop = asyncio.get_running_loop()
                call = functools.partial(getattr(shard, method), *args)
                return await loop.run_in_executor(self._pool, call)
            return getattr(shard, method)(*args)
        except Exception as err:  # carried to the client and raised there
            return Raised(err)

    async def where(self) -> dict[str, Any]:
        """``{"node_id", "pid"}`` of the actor's process."""
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}


class Directory:
    """A named actor that tells ``connect(name)`` the service's tables and shard counts."""

    def __init__(self, layout: dict[str, int], checkpoint_dir: str | None) -> None:
        self._layout = dict(layout)
        self._checkpoint_dir = checkpoint_dir

    async def layout(self) -> dict[str, Any]:
        return {"tables": self._layout, "checkpoint_dir": self._checkpoint_dir}


_UNAVAILABLE = (ray_errors.RayActorError, ray_errors.ActorUnavailableError)


class RayEndpoint:
    """A shard hosted by a :class:`ShardActor` (see :class:`~recollect.service.Endpoint`).

    Errors of the actor itself (killed, crashed, restarting, unreachable) raise
    :class:`~recollect.errors.ShardUnavailableError` naming table and shard.
    """

    def __init__(self, table: str, shard: int, actor: Any) -> None:
        self.table = table
        self.shard = shard
        self.actor = actor

    def submit(self, method: str, *args: Any) -> Any:
        try:
            return self.actor.call.remote(method, args)
        except _UNAVAILABLE as err:
            raise self._unavailable(err) from err

    def _unavailable(self, err: BaseException) -> ShardUnavailableError:
        return ShardUnavailableError(
            f"table {self.table!r} shard {self.shard} is unavailable ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}). It was killed or its "
            "node died; a shard served with max_restarts > 0 comes back from its last "
            "checkpoint."
        )

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        try:
            value = ray.get(handle, timeout=timeout)
        except _UNAVAILABLE as err:
            raise self._unavailable(err) from err
        except ray_errors.GetTimeoutError as err:
            raise ShardUnavailableError(
                f"table {self.table!r} shard {self.shard} did not answer within {timeout:g} s."
            ) from err
        if type(value) is Raised:
            raise value.error
        return value

    def wait(self, handles: list[Any], timeout: float | None = None) -> None:
        ray.wait(handles, num_returns=len(handles), timeout=timeout)

    def done(self, handle: Any) -> bool:
        ready, _ = ray.wait([handle], timeout=0)
        return bool(ready)

    def __repr__(self) -> str:
        return f"RayEndpoint(table={self.table!r}, shard={self.shard})"
