"""The Ray actor hosting one shard, and the endpoint through which a client reaches it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import pickle
from typing import Any

import ray
from ray import exceptions as ray_errors

from recollect.buffers import ReplayBuffer
from recollect.errors import ShardUnavailableError, StateError
from recollect.service.endpoint import Raised
from recollect.service.shard import open_shard

__all__ = ["RayEndpoint", "ShardActor"]

#: Ray namespace of every recollect actor (names: "<service>", "<service>/<table>/<k>")
NAMESPACE = "recollect"


class ShardActor:
    """One shard in a Ray actor process (asynchronous: calls never wait for each other).

    Ray starts the calls of an asynchronous actor in no guaranteed order, so a
    writer's chunks in flight could be stored out of order (seen: chunk 1 before
    chunk 0 of a row). Each ``extend`` carries its number in its lease (set by
    :class:`RayEndpoint`); the actor holds a chunk until the one before it has
    gone to the shard's insert thread, which stores chunks one at a time in that
    order. Samples and priority updates run on the event loop meanwhile, so
    they never queue behind every chunk in flight. A sample that may wait on
    the rate limiter runs on a thread pool, so it never blocks the actor's other
    calls. Exceptions come back as :class:`Raised` values, so the client raises
    the shard's own error (type and message).

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
        self._inserts = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shard-insert")
        self._turns: dict[int, int] = {}  # lease id -> number of its next extend
        self._turn_taken = asyncio.Condition()
        self._pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="shard-wait")
        self._turn_timeout = max(float(lease_timeout), 1.0)  # a chunk waits this for the one before

    async def call(self, method: str, args: bytes, seq: int | None = None) -> bytes:
        """``Shard.<method>(*args)`` with ``args`` and the result pickled (see
        :class:`RayEndpoint`); ``seq``: the number of an ``extend`` in its lease.
        An exception is returned as :class:`Raised`."""
        shard = self.shard
        try:
            args = pickle.loads(args)
            call = functools.partial(getattr(shard, method), *args)
            if method == "extend":
                value = await self._extend_in_turn(args[0], seq, call)
            elif shard.may_block(method):
                value = await asyncio.get_running_loop().run_in_executor(self._pool, call)
            else:
                value = call()
                if method == "reserve":
                    self._turns[value[0]] = 0
                elif method == "release":
                    await self._take_turn(args[0], None)
        except Exception as err:  # carried to the client and raised there
            value = Raised(err)
        return pickle.dumps(value, _PROTOCOL)

    async def _extend_in_turn(self, lease_id: int, seq: int | None, call: Any) -> Any:
        """Runs ``call`` on the insert thread after the lease's earlier extends were queued."""
        if seq is not None and lease_id in self._turns:
            try:
                async with self._turn_taken:
                    await asyncio.wait_for(
                        self._turn_taken.wait_for(lambda: self._turns.get(lease_id, seq) == seq),
                        self._turn_timeout,
                    )
            except TimeoutError:
                raise StateError(
                    f"table {self.shard.table!r} shard {self.shard.index}: chunk {seq} of writer "
                    f"lease {lease_id} waited {self._turn_timeout:g} s for chunk "
                    f"{self._turns.get(lease_id)} of that lease, which never arrived; the "
                    "writer's earlier chunks were lost. Open a new writer."
                ) from None
        stored = asyncio.get_running_loop().run_in_executor(self._inserts, call)
        if seq is not None and lease_id in self._turns:
            await self._take_turn(lease_id, seq + 1)
        return await stored

    async def _take_turn(self, lease_id: int, turn: int | None) -> None:
        """Sets the number of the lease's next extend (None: the lease is gone)."""
        if turn is None:
            self._turns.pop(lease_id, None)
        else:
            self._turns[lease_id] = turn
        async with self._turn_taken:
            self._turn_taken.notify_all()

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


#: pickle protocol of requests and results: arrays in band, one buffer per call
_PROTOCOL = 5

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
        self._seq: dict[int, int] = {}  # lease id -> number of its next extend

    def submit(self, method: str, *args: Any) -> Any:
        seq = None
        if method == "extend":  # numbered, so the actor stores a lease's chunks in order
            seq = self._seq.get(args[0], 0)
            self._seq[args[0]] = seq + 1
        elif method == "release":
            self._seq.pop(args[0], None)
        try:
            return self.actor.call.remote(method, pickle.dumps(args, _PROTOCOL), seq)
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
        value = pickle.loads(value)
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
