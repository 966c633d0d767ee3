"""The shard's end of the chunk channel: :class:`ChunkListener` accepts writer
connections in the shard's process and stores their chunks (see
:mod:`recollect.ray.channel` for the design and :class:`ChunkChannel
<recollect.ray.channel.ChunkChannel>` for the writer's end).

One thread accepts connections and reads their handshakes, and one thread per
authenticated connection stores that connection's chunks in the order they were
sent and answers each with the shard's return value or exception. The handshake is
guarded: it is read without blocking, for all pending connections at once; a
connection that has not sent the whole token within ``handshake_timeout`` seconds,
or sent anything else, is closed; an error of one connection (or running out of file
descriptors, after which accepting pauses and resumes) never stops the listener.

At most ``max_pending`` connections wait for their handshake. When that many wait
and another connects, the listener first reads the handshakes that have arrived,
then closes the oldest pending connection if it waited ``eviction_grace`` seconds,
else leaves the new one in the listen queue until a slot frees or the oldest is
that old. A writer sends its token as soon as it is connected, so it never waits
long; a peer without the token cannot hold the slots against writers (it would
have to outpace them all), and a burst of writers waits in the queue instead of
being refused.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import secrets
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time
from typing import cast

from recollect.ray.channel_wire import (
    ACCEPTED,
    HELLO,
    TOKEN_BYTES,
    TRANSPORT_ERRORS,
    recv_frame,
    send_frame,
)
from recollect.service.wire import codec
from recollect.service.wire.protocol import ShardProtocol

__all__ = ["EVICTION_GRACE_S", "HANDSHAKE_TIMEOUT_S", "MAX_PENDING", "ChunkListener"]

#: seconds a new connection has to send its whole handshake (the listener's default)
HANDSHAKE_TIMEOUT_S = 5.0
#: connections waiting for their handshake at once (the listener's default)
MAX_PENDING = 64
#: seconds a pending handshake is safe from eviction by a newer connection (the default)
EVICTION_GRACE_S = 0.05
#: accept() errors after which accepting pauses (descriptors or memory ran out)
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_MAX_BACKOFF_S = 1.0


class _Pending:
    """A connection waiting for its handshake: the bytes read so far, when it was
    accepted and its deadline."""

    __slots__ = ("accepted", "data", "deadline")

    def __init__(self, accepted: float, deadline: float) -> None:
        self.data = b""
        self.accepted = accepted
        self.deadline = deadline


class ChunkListener:
    """Accepts writer connections in the shard's process and stores their chunks.

    Each message is a :class:`~recollect.service.wire.requests.Request` (a writer's
    ``Extend``) packed by :mod:`recollect.service.wire.codec`, applied to the shard and
    answered by its packed return value or a
    :class:`~recollect.service.wire.endpoint.Raised` of what it raised.

    Args:
        shard: the :class:`~recollect.service.shard.Shard` the chunks go to.
        handshake_timeout: seconds a new connection has to send the token
            (all its bytes) before it is closed.
        max_pending: connections waiting for their handshake at once; a newer one
            takes the slot of the oldest once that waited ``eviction_grace`` s
            (and waits in the listen queue until then).
        eviction_grace: seconds a pending connection keeps its slot whatever connects
            after it.

    Attributes:
        address: the socket's address (a str; on Linux it starts with ``"\\0"``).
        token: bytes a connection must send first.
    """

    def __init__(
        self,
        shard: ShardProtocol,
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
        max_pending: int = MAX_PENDING,
        eviction_grace: float = EVICTION_GRACE_S,
    ) -> None:
        self.shard = shard
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.handshake_timeout = float(handshake_timeout)
        self.max_pending = int(max_pending)
        self.eviction_grace = float(eviction_grace)
        self._directory: str | None = None
        if sys.platform.startswith("linux"):
            address = f"\0recollect-{os.getpid()}-{secrets.token_hex(8)}"
        else:
            self._directory = tempfile.mkdtemp(prefix="recollect-")
            address = os.path.join(self._directory, "chunks.sock")
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.bind(address)
            self._socket.listen(128)
            self._socket.setblocking(False)
            self._wake_read, self._wake_write = socket.socketpair()
        except BaseException:
            self._socket.close()
            raise
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self.address: str = address
        self._closed = False
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._socket, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        self._pending: dict[socket.socket, _Pending] = {}
        self._resume_at: float | None = None  # accepting paused until then
        self._full = False  # paused because every handshake slot is young: resume when one frees
        self._backoff = 0.01
        self._accepting = threading.Thread(
            target=self._run, name=f"recollect-chunks-{shard.table}-{shard.index}", daemon=True
        )
        self._accepting.start()

    @property
    def pending(self) -> int:
        """Connections accepted and still waiting for their handshake."""
        return len(self._pending)

    # -- the accepting thread ------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._closed:
                try:
                    self._step()
                except Exception:  # never let one connection's trouble stop the listener
                    time.sleep(0.01)
        finally:
            for sock in list(self._pending):
                self._drop(sock)
            with contextlib.suppress(Exception):
                self._selector.close()
            for sock in (self._socket, self._wake_read, self._wake_write):
                sock.close()

    def _step(self) -> None:
        now = time.monotonic()
        wakes = [p.deadline for p in self._pending.values()]
        if self._resume_at is not None:
            wakes.append(self._resume_at)
        timeout = max(min(wakes) - now, 0.0) if wakes else None
        for key, _ in self._selector.select(timeout):
            if key.data == "accept":
                self._accept_ready()
            elif key.data == "wake":
                with contextlib.suppress(OSError):
                    self._wake_read.recv(4096)
            else:
                self._read_handshake(cast(socket.socket, key.fileobj))
        now = time.monotonic()
        for sock in [s for s, p in self._pending.items() if p.deadline <= now]:
            self._drop(sock)
        if self._resume_at is not None and (
            now >= self._resume_at or (self._full and len(self._pending) < self.max_pending)
        ):
            self._resume_at = None
            self._full = False
            self._selector.register(self._socket, selectors.EVENT_READ, "accept")

    def _pause_accepting(self, until: float, *, full: bool) -> None:
        """Leaves new connections in the listen queue until ``until`` (or, ``full``, until
        a handshake slot frees)."""
        self._selector.unregister(self._socket)
        self._resume_at = until
        self._full = full

    def _accept_ready(self) -> None:
        for _ in range(256):  # then let the handshakes and deadlines have their turn
            if len(self._pending) >= self.max_pending and not self._free_a_slot():
                return
            try:
                sock, _address = self._socket.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in _EXHAUSTED:  # pause accepting, keep serving; try again later
                    self._pause_accepting(time.monotonic() + self._backoff, full=False)
                    self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
                return  # e.g. ECONNABORTED: that connection is gone
            self._backoff = 0.01
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ, "handshake")
            except Exception:
                sock.close()
                continue
            now = time.monotonic()
            self._pending[sock] = _Pending(now, now + self.handshake_timeout)
            self._read_handshake(sock)  # a writer sends its token at once: it may be here

    def _free_a_slot(self) -> bool:
        """Makes room for one more pending handshake: reads the handshakes that arrived,
        else closes the oldest pending connection once it waited ``eviction_grace`` s.
        False when every pending one is younger: accepting pauses until a slot frees or
        the oldest is that old."""
        for sock in list(self._pending):
            self._read_handshake(sock)
        if len(self._pending) < self.max_pending:
            return True
        oldest, pending = next(iter(self._pending.items()))  # dicts keep accepting order
        if time.monotonic() - pending.accepted >= self.eviction_grace:
            self._drop(oldest)
            return True
        self._pause_accepting(pending.accepted + self.eviction_grace, full=True)
        return False

    def _read_handshake(self, sock: socket.socket) -> None:
        pending = self._pending.get(sock)
        if pending is None:
            return
        try:
            data = sock.recv(len(HELLO) + TOKEN_BYTES - len(pending.data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        pending.data += data
        head = pending.data[: len(HELLO)]
        if not data or head != HELLO[: len(head)]:  # closed, or not a token frame
            self._drop(sock)
            return
        if len(pending.data) < len(HELLO) + TOKEN_BYTES:
            return
        self._selector.unregister(sock)
        del self._pending[sock]
        if not hmac.compare_digest(pending.data[len(HELLO) :], self.token):
            sock.close()
            return
        try:
            sock.setblocking(True)
            sock.sendall(ACCEPTED)
        except OSError:
            sock.close()
            return
        try:
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()
        except Exception:  # no thread to be had: the writer falls back to Ray calls
            sock.close()

    def _drop(self, sock: socket.socket) -> None:
        self._pending.pop(sock, None)
        with contextlib.suppress(Exception):
            self._selector.unregister(sock)
        sock.close()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            try:
                while True:  # each chunk read into a buffer of its own, decoded in place
                    send_frame(sock, [codec.respond(self.shard, recv_frame(sock))])
            except TRANSPORT_ERRORS:  # the writer closed or died; nothing half-read is stored
                return

    def close(self) -> None:
        """Stops accepting and closes waiting handshakes (open connections end when their
        writers close them)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")
        if threading.current_thread() is not self._accepting:
            self._accepting.join(5.0)
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
