"""The shard's end of the chunk channel: :class:`ChunkListener` accepts writer
connections in the shard's process and stores their chunks (see
:mod:`recollect.service.channel` for the design and :class:`ChunkChannel
<recollect.service.channel.ChunkChannel>` for the writer's end).

One thread accepts connections and reads their handshakes, and one thread per
authenticated connection stores that connection's chunks in the order they were
sent and answers each with the shard's return value or exception. The handshake is
guarded: it is read without blocking, for all pending connections at once; a
connection that has not sent the whole token within ``handshake_timeout`` seconds,
or sent anything else, is closed; at most ``max_pending`` connections wait for
their handshake; an error of one connection (or running out of file descriptors,
after which accepting pauses and resumes) never stops the listener.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import pickle
import secrets
import selectors
import shutil
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import cast

from recollect.service.channel_wire import (
    ACCEPTED,
    HELLO,
    TOKEN_BYTES,
    TRANSPORT_ERRORS,
    answer,
)
from recollect.service.endpoint import Raised
from recollect.service.protocol import ShardProtocol

__all__ = ["HANDSHAKE_TIMEOUT_S", "MAX_PENDING", "ChunkListener"]

#: seconds a new connection has to send its whole handshake (the listener's default)
HANDSHAKE_TIMEOUT_S = 5.0
#: connections waiting for their handshake at once (the listener's default)
MAX_PENDING = 64
#: accept() errors after which accepting pauses (descriptors or memory ran out)
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_MAX_BACKOFF_S = 1.0


class _Pending:
    """A connection waiting for its handshake: the bytes read so far and its deadline."""

    __slots__ = ("data", "deadline")

    def __init__(self, deadline: float) -> None:
        self.data = b""
        self.deadline = deadline


class ChunkListener:
    """Accepts writer connections in the shard's process and stores their chunks.

    Each message is a pickled :class:`~recollect.service.requests.Request`
    (a writer's ``Extend``), applied to the shard and answered by its pickled
    return value or a :class:`~recollect.service.endpoint.Raised` of what it raised.

    Args:
        shard: the :class:`~recollect.service.shard.Shard` the chunks go to.
        handshake_timeout: seconds a new connection has to send the token
            (all its bytes) before it is closed.
        max_pending: connections waiting for their handshake at once; more are
            closed as soon as they are accepted.

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
    ) -> None:
        self.shard = shard
        self.token = secrets.token_bytes(TOKEN_BYTES)
        self.handshake_timeout = float(handshake_timeout)
        self.max_pending = int(max_pending)
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
        self._paused_until: float | None = None  # accepting paused (descriptors ran out)
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
        if self._paused_until is not None:
            wakes.append(self._paused_until)
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
        if self._paused_until is not None and now >= self._paused_until:
            self._paused_until = None
            self._selector.register(self._socket, selectors.EVENT_READ, "accept")

    def _accept_ready(self) -> None:
        for _ in range(256):  # then let the handshakes and deadlines have their turn
            try:
                sock, _address = self._socket.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in _EXHAUSTED:  # pause accepting, keep serving; try again later
                    self._selector.unregister(self._socket)
                    self._paused_until = time.monotonic() + self._backoff
                    self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
                return  # e.g. ECONNABORTED: that connection is gone
            self._backoff = 0.01
            if len(self._pending) >= self.max_pending:
                sock.close()
                continue
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ, "handshake")
            except Exception:
                sock.close()
                continue
            self._pending[sock] = _Pending(time.monotonic() + self.handshake_timeout)

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
            conn = Connection(sock.detach())
        except OSError:
            sock.close()
            return
        try:
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        except Exception:  # no thread to be had: the writer falls back to Ray calls
            conn.close()

    def _drop(self, sock: socket.socket) -> None:
        self._pending.pop(sock, None)
        with contextlib.suppress(Exception):
            self._selector.unregister(sock)
        sock.close()

    def _serve(self, conn: Connection) -> None:
        with conn:
            try:
                while True:
                    message = conn.recv_bytes()
                    try:
                        value = pickle.loads(message).apply(self.shard)
                    except Exception as err:  # carried to the writer and raised there
                        value = Raised(err)
                    conn.send_bytes(answer(value))
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
