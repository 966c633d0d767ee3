"""The Ray actor hosting one shard, and the endpoint through which a client reaches it."""

from __future__ import annotations

import os
import pickle
import threading
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
    """One shard in a Ray actor process: a threaded actor, so calls never wait for each other.

    Ray runs each call on one of the actor's threads (``max_concurrency`` of
    them; a threaded actor takes about 1.5 times the calls per second of an
    asynchronous one, measured with 8 writer processes). A sample or insert
    that waits on the rate limiter blocks only its own thread. Ray starts the
    calls of a concurrent actor in no guaranteed order, so a writer's chunks in
    flight could be stored out of order (seen: chunk 1 before chunk 0 of a
    row). Each ``extend`` carries its number in its lease (set by
    :class:`RayEndpoint`), and waits until the chunk before it was stored.
    Exceptions come back as :class:`Raised` values, so the client raises the
    shard's own error (type and message).

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
        self._turns: dict[int, int] = {}  # lease id -> number of its next extend
        self._turn_taken = threading.Condition()
        self._turn_timeout = max(float(lease_timeout), 1.0)  # a chunk waits this for the one before

    def call(self, method: str, args: bytes, seq: int | None = None) -> bytes:
        """``Shard.<method>(*args)`` with ``args`` and the result pickled (see
        :class:`RayEndpoint`); ``seq``: the number of an ``extend`` in its lease.
        An exception is returned as :class:`Raised`."""
        try:
            args = pickle.loads(args)
            if method == "extend" and seq is not None:
                value = self._extend_in_turn(args, seq)
            else:
                value = getattr(self.shard, method)(*args)
                if method == "reserve":
                    with self._turn_taken:
                        self._turns[value[0]] = 0
                elif method == "release":
                    self._take_turn(args[0], None)
        except Exception as err:  # carried to the client and raised there
            value = Raised(err)
        return pickle.dumps(value, _PROTOCOL)

    def _extend_in_turn(self, args: tuple, seq: int) -> Any:
        """``Shard.extend(*args)`` once the lease's earlier extends were stored."""
        lease_id = args[0]
        with self._turn_taken:
            if not self._turn_taken.wait_for(
                lambda: self._turns.get(lease_id, seq) == seq, self._turn_timeout
            ):
                raise StateError(
                    f"table {self.shard.table!r} shard {self.shard.index}: chunk {seq} of writer "
                    f"lease {lease_id} waited {self._turn_timeout:g} s for chunk "
                    f"{self._turns.get(lease_id)} of that lease, which never arrived; the "
                    "writer's earlier chunks were lost. Open a new writer."
                )
        try:
            return self.shard.extend(*args)
        finally:
            with self._turn_taken:
                if lease_id in self._turns:
                    self._take_turn(lease_id, seq + 1)

    def _take_turn(self, lease_id: int, turn: int | None) -> None:
        """Sets the number of the lease's next extend (None: the lease is gone)."""
        with self._turn_taken:
            if turn is None:
                self._turns.pop(lease_id, None)
            else:
                self._turns[lease_id] = turn
            self._turn_taken.notify_all()

    def where(self) -> dict[str, Any]:
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
