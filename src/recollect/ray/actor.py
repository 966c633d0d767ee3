"""The Ray actor hosting one shard, and the endpoint through which a client reaches it."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import ray
from ray import exceptions as ray_errors

from recollect.buffers import ReplayBuffer
from recollect.errors import (
    CheckpointError,
    ShardNoAnswerError,
    ShardUnavailableError,
    StateError,
)
from recollect.ray.channel import (
    CONNECT_TIMEOUT_S,
    TRANSPORT_ERRORS,
    ChunkChannel,
    ChunkListener,
)
from recollect.service.shard import open_shard
from recollect.service.wire import codec
from recollect.service.wire.endpoint import Raised
from recollect.service.wire.requests import Request

__all__ = ["ChunkCall", "RayEndpoint", "ShardActor"]

#: Ray namespace of every recollect actor (names: "<service>", "<service>/<table>/<k>")
NAMESPACE = "recollect"
#: seconds before a stream the chunk listener refused tries its socket again (doubling)
RETRY_FIRST_S = 0.25
#: the longest wait between two tries of a stream's socket
RETRY_LONGEST_S = 8.0
#: tries of a refused stream's socket before it stays on Ray calls for the rest of its lease
RETRY_ATTEMPTS = 8
#: seconds a retry waits to connect and be accepted
RETRY_CONNECT_TIMEOUT_S = 1.0


class ShardActor:
    """One shard in a Ray actor process: a threaded actor, so calls never wait for each other.

    Ray runs each call on one of the actor's threads (``max_concurrency`` of
    them; a threaded actor takes about 1.5 times the calls per second of an
    asynchronous one, measured with 8 writer processes). A sample or insert
    that waits on the rate limiter blocks only its own thread. Ray starts the
    calls of a concurrent actor in no guaranteed order; the shard stores a
    writer's chunks in the order of their numbers (``Shard.extend``'s ``seq``).
    Exceptions come back as :class:`Raised` values, so the client raises the
    shard's own error (type and message). With ``local_writes``, writers on the
    actor's node send their chunks over its
    :class:`~recollect.ray.channel.ChunkListener` instead (a connection's
    chunks are stored in the order sent; no Ray call per chunk).

    Args:
        table: the table's name.
        config: ``ReplayBuffer.config()`` of this shard (``shard`` set).
        checkpoint_dir: where the shard restores from (on a restart too) and
            keeps its insert counters, or None.
        lease_timeout: as :class:`~recollect.service.Server`.
        local_writes: open a :class:`~recollect.ray.channel.ChunkListener`,
            so writers on this node send their chunks over a Unix socket.
    """

    def __init__(
        self,
        table: str,
        config: dict[str, Any],
        checkpoint_dir: str | None,
        lease_timeout: float,
        local_writes: bool = False,
    ) -> None:
        buffer = ReplayBuffer.from_config(config)
        #: why the shard could not be restored (a damaged checkpoint): every call raises it
        self.restore_error: CheckpointError | None = None
        try:
            self.shard = open_shard(
                table, buffer, checkpoint_dir=checkpoint_dir, lease_timeout=lease_timeout
            )
        except CheckpointError as err:  # kept, so serve() and every client raise it as such
            self.restore_error = err
            local_writes = False
        self.listener = ChunkListener(self.shard) if local_writes else None

    def call(self, request: bytes) -> bytes:
        """Applies the :class:`~recollect.service.wire.requests.Request` packed in ``request``
        (:mod:`recollect.service.wire.codec`) to the shard; returns its result packed (an
        exception as :class:`Raised`)."""
        if self.restore_error is not None:
            return codec.packed(Raised(self.restore_error))
        return codec.respond(self.shard, request)

    def failed_restore(self) -> CheckpointError | None:
        """The :class:`CheckpointError` that kept the shard from restoring, or None."""
        return self.restore_error

    def where(self) -> dict[str, Any]:
        """``{"node_id", "pid"}`` of the actor's process."""
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def chunk_listener(self) -> dict[str, Any] | None:
        """``{"node_id", "address", "token"}`` of the actor's chunk listener, or None
        (served with ``local_writes=False``)."""
        if self.listener is None:
            return None
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "address": self.listener.address,
            "token": self.listener.token,
        }


class Directory:
    """A named actor that tells ``connect(name)`` the service's tables and shard counts."""

    def __init__(self, layout: dict[str, int], checkpoint_dir: str | None) -> None:
        self._layout = dict(layout)
        self._checkpoint_dir = checkpoint_dir

    async def layout(self) -> dict[str, Any]:
        return {"tables": self._layout, "checkpoint_dir": self._checkpoint_dir}


_UNAVAILABLE = (ray_errors.RayActorError, ray_errors.ActorUnavailableError)


@dataclasses.dataclass
class _Retry:
    """When a stream whose socket was refused tries it again, and how often it did."""

    attempts: int = 0
    at: float = 0.0


@dataclasses.dataclass(frozen=True)
class ChunkCall:
    """The handle of ``request`` sent over a :class:`ChunkChannel` (its ``number`` there)."""

    channel: ChunkChannel
    number: int
    request: Request[Any]


class RayEndpoint:
    """A shard hosted by a :class:`ShardActor` (see :class:`~recollect.service.Endpoint`).

    The requests of a stream (a writer's chunks) go over the actor's chunk
    listener when the caller runs on the actor's node and the shard was served
    with ``local_writes`` (one Unix socket per stream, see
    :mod:`recollect.ray.channel`); everything else, and streams from other
    nodes, go as Ray calls. A stream the listener refused (its handshake slots
    taken, say) sends over Ray and tries the socket again after 0.25, 0.5, ... s
    (at most 8 s apart, ``RETRY_ATTEMPTS`` times), moving over once accepted: its
    chunks are numbered, so the shard stores them in order whatever carried them.
    Errors of the actor itself (killed, crashed, restarting, unreachable) raise
    :class:`~recollect.errors.ShardUnavailableError` naming table and shard.
    """

    def __init__(self, table: str, shard: int, actor: Any) -> None:
        self._connect(table, shard, actor)

    def _connect(self, table: str, shard: int, actor: Any) -> None:
        self.table = table
        self.shard = shard
        self.actor = actor
        self._over_ray: set[int] = set()  # streams whose requests went as Ray calls
        self._channels: dict[int, ChunkChannel | None] = {}  # stream -> its socket, or None: Ray
        self._listener: dict[str, Any] | None = None  # the actor's, when on this node
        self._listener_asked = False
        self._retries: dict[int, _Retry] = {}  # refused streams that try their socket again

    def __getstate__(self) -> dict[str, Any]:
        # sockets stay in their process; a copy elsewhere opens its own
        return {"table": self.table, "shard": self.shard, "actor": self.actor}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._connect(state["table"], state["shard"], state["actor"])

    def send(self, request: Request[Any]) -> Any:
        stream = request.stream
        if stream is not None:
            channel = self._channel(stream, request.numbered)
            if channel is not None:
                try:
                    return ChunkCall(channel, channel.send_request(request), request)
                except TRANSPORT_ERRORS as err:
                    raise self._channel_lost(request, err) from err
            self._over_ray.add(stream)
        ended = request.ends_stream
        if ended is not None:
            self._over_ray.discard(ended)
            self._retries.pop(ended, None)
            channel = self._channels.pop(ended, None)
            if channel is not None:
                channel.close()
        try:
            return self.actor.call.remote(codec.packed(request))
        except _UNAVAILABLE as err:
            raise self._unavailable(err) from err

    def _channel(self, stream: int, numbered: bool) -> ChunkChannel | None:
        """The stream's socket to the actor's chunk listener; None: this request goes over
        Ray (decided at the stream's first request; a refused stream tries again when due,
        with a ``numbered`` request)."""
        if stream in self._channels:
            channel = self._channels[stream]
            retry = self._retries.get(stream)
            if channel is not None or retry is None or not numbered or time.monotonic() < retry.at:
                return channel
            channel = self._open_channel(stream, RETRY_CONNECT_TIMEOUT_S)
        elif stream in self._over_ray:
            channel = None
        else:
            channel = self._open_channel(stream, CONNECT_TIMEOUT_S)
        self._channels[stream] = channel
        return channel

    def _open_channel(self, stream: int, timeout: float) -> ChunkChannel | None:
        """A socket for ``stream`` to the actor's chunk listener, or None: no listener on
        this node, or it refused (then the stream tries again later, see the class)."""
        if not self._listener_asked:
            self._listener = self._local_listener()
            self._listener_asked = True
        if self._listener is None:
            return None
        try:
            channel = ChunkChannel(self._listener["address"], self._listener["token"], timeout)
        except TRANSPORT_ERRORS:  # slots taken, another network namespace, a restarted actor
            self._listener_asked = False
            retry = self._retries.setdefault(stream, _Retry())
            if retry.attempts < RETRY_ATTEMPTS:
                wait_s = min(RETRY_FIRST_S * 2**retry.attempts, RETRY_LONGEST_S)
                retry.at = time.monotonic() + wait_s
                retry.attempts += 1
            else:  # on Ray calls for the rest of its lease
                del self._retries[stream]
            return None
        self._retries.pop(stream, None)
        self._over_ray.discard(stream)
        return channel

    def _local_listener(self) -> dict[str, Any] | None:
        """The actor's chunk listener if it runs on this process's node, else None."""
        try:
            listener = ray.get(self.actor.chunk_listener.remote())
        except _UNAVAILABLE as err:
            raise self._unavailable(err) from err
        if listener is None or listener["node_id"] != ray.get_runtime_context().get_node_id():
            return None
        return listener

    def _channel_lost(self, request: Request[Any], err: BaseException) -> BaseException:
        """The error of a request whose stream's socket broke: sends the request's
        :meth:`~recollect.service.wire.requests.Request.stream_lost` over Ray, so a restarted
        shard answers as for any chunk of a lease it does not hold (StateError) and a dead
        one as for any call (ShardUnavailableError)."""
        probe = request.stream_lost()
        if probe is not None:
            try:
                self.result(self.actor_call(probe))
            except (ShardUnavailableError, StateError) as answer:
                return answer
        return self._unavailable(err)  # alive and holding the lease: the socket itself broke

    def actor_call(self, request: Request[Any]) -> Any:
        """``request`` as a Ray call to the actor (never over the chunk listener)."""
        try:
            return self.actor.call.remote(codec.packed(request))
        except _UNAVAILABLE as err:
            raise self._unavailable(err) from err

    def _unavailable(self, err: BaseException) -> ShardUnavailableError:
        return ShardUnavailableError(
            f"table {self.table!r} shard {self.shard} is unavailable ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}). It was killed or its "
            "node died; a shard served with max_restarts > 0 comes back from its last "
            "checkpoint."
        )

    def _no_answer(self, timeout: float | None) -> ShardNoAnswerError:
        return ShardNoAnswerError(
            f"table {self.table!r} shard {self.shard} did not answer within {timeout:g} s."
        )

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        if type(handle) is ChunkCall:
            try:
                ready = handle.channel.ready(handle.number, timeout)
            except TRANSPORT_ERRORS as err:
                raise self._channel_lost(handle.request, err) from err
            if not ready:
                raise self._no_answer(timeout)
            return handle.channel.result(handle.number)
        try:
            value = ray.get(handle, timeout=timeout)
        except _UNAVAILABLE as err:
            raise self._unavailable(err) from err
        except ray_errors.GetTimeoutError as err:
            raise self._no_answer(timeout) from err
        return codec.answer(value)

    def __repr__(self) -> str:
        return f"RayEndpoint(table={self.table!r}, shard={self.shard})"
