"""Writer chunks over a Unix-domain socket: the insert path between processes of one host.

A Ray actor call costs about 0.8 ms of CPU on each side whatever it carries
(measured with 8 writer processes on 2 cores), which held inserts over Ray
below 500k steps/s while storing a chunk takes 57 us. A writer on the shard's
host can send its chunks over a Unix-domain socket instead: one message per
chunk, one small acknowledgement back, no scheduler in between.

:class:`ChunkListener` runs in the shard's process: one thread accepts
connections and reads their handshakes, and one thread per authenticated
connection stores that connection's chunks in the order they were sent (so
the shard, which stores a lease's chunks by their numbers, never waits) and
answers each with the shard's return value or exception. :class:`ChunkChannel`
is the writer's end: one connection per writer lease, bounded by the writer's
in-flight limit.
Messages are packed by :mod:`recollect.service.wire.codec` (header values and raw
array buffers, no pickle) in :mod:`multiprocessing.connection`'s length-prefixed
framing, written and read on the sockets themselves (:mod:`recollect.ray.channel_wire`:
a chunk's parts go out in one ``sendmsg``, unjoined, and are read into one buffer that
the shard decodes in place); a message cut short by a dying writer is never decoded, so
a chunk is stored whole or not at all.

A connection is accepted only after it sends the listener's ``token`` (random,
32 bytes) as its first message: whoever may call the shard (through Ray) learns
it, nobody else. Any local process can find the socket and connect, so the
handshake is guarded: it is read without blocking, by the accepting thread, for
all pending connections at once, and a connection that has not sent the whole
token within ``handshake_timeout`` seconds (counting bytes, not readiness), or
sent anything else, is closed; at most ``max_pending`` connections wait for
their handshake (a newer one takes the oldest one's slot once that waited
``eviction_grace`` seconds, and waits in the listen queue until then, so a peer
without the token cannot keep writers out and a burst of writers is not refused);
an error of one connection (or running out of file descriptors, after which
accepting pauses and resumes) never stops the listener. A writer's
:class:`ChunkChannel` gives up after its own ``timeout`` (a full listen queue
included), and its caller falls back to Ray calls and tries the socket again later
(:class:`~recollect.ray.actor.RayEndpoint`). On Linux the socket lives in the
abstract namespace (no file to clean up after a killed process); elsewhere in a
private temporary directory.

This module is the writer's end (:class:`ChunkChannel`); the shard's end is
:mod:`recollect.ray.listener` (re-exported here) and the wire format both share
:mod:`recollect.ray.channel_wire`.
"""

from __future__ import annotations

import selectors
import socket
import time
from typing import Any

from recollect.ray.channel_wire import (
    ACCEPTED,
    HEADER,
    HELLO,
    TRANSPORT_ERRORS,
    send_frame,
)
from recollect.ray.listener import (
    EVICTION_GRACE_S,
    HANDSHAKE_TIMEOUT_S,
    MAX_PENDING,
    ChunkListener,
)
from recollect.service.wire import codec
from recollect.service.wire.requests import Request

__all__ = [
    "CONNECT_TIMEOUT_S",
    "EVICTION_GRACE_S",
    "HANDSHAKE_TIMEOUT_S",
    "MAX_PENDING",
    "TRANSPORT_ERRORS",
    "ChunkChannel",
    "ChunkListener",
]

#: seconds a writer waits to connect and be accepted (ChunkChannel's default)
CONNECT_TIMEOUT_S = 5.0
#: bytes a writer reads of its answers at once (each about a hundred)
_READ_BYTES = 1 << 16


def _connect(address: str, token: bytes, timeout: float) -> socket.socket:
    """A socket connected to the listener at ``address`` that accepted ``token``.

    Raises:
        TimeoutError: not connected and accepted within ``timeout`` seconds (a
            full listen queue, a listener that does not answer).
        ConnectionRefusedError: no listener there, or it refused the token.
        OSError: any other socket error.
    """
    deadline = time.monotonic() + timeout
    late = f"the chunk listener at {address!r} did not accept within {timeout:g} s."

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(late)
        return remaining

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        while True:
            sock.settimeout(left())
            try:
                sock.connect(address)
                break
            except (BlockingIOError, InterruptedError):  # its listen queue is full: retry
                time.sleep(min(0.01, left()))
        sock.settimeout(left())
        sock.sendall(HELLO + token)
        answer = b""
        while len(answer) < len(ACCEPTED):
            sock.settimeout(left())
            part = sock.recv(len(ACCEPTED) - len(answer))
            if not part:
                break
            answer += part
        if answer != ACCEPTED:
            raise ConnectionRefusedError(f"the chunk listener at {address!r} refused")
        sock.settimeout(None)
    except TimeoutError as err:  # a socket operation's own timeout says only "timed out"
        sock.close()
        if str(err) == late:
            raise
        raise TimeoutError(late) from err
    except BaseException:
        sock.close()
        raise
    return sock


class ChunkChannel:
    """A writer's connection to a :class:`ChunkListener`: chunks out, acknowledgements back.

    Not thread-safe: one writer uses it. Acknowledgements come back in the
    order the chunks were sent; :meth:`ready` reads them up to the one asked for.

    Args:
        address: the listener's ``address``.
        token: the listener's ``token``.
        timeout: seconds to connect and be accepted, at most.

    Raises:
        TimeoutError: not accepted within ``timeout`` (e.g. the listener's
            queue is full); an OSError.
        OSError, EOFError: no listener at ``address``, or it refused the token.
    """

    def __init__(self, address: str, token: bytes, timeout: float = CONNECT_TIMEOUT_S) -> None:
        self._sock = _connect(address, token, timeout)
        # registered once: a wait with a timeout builds nothing
        self._readable = selectors.DefaultSelector()
        self._readable.register(self._sock, selectors.EVENT_READ)
        self._sent = 0
        self._read = 0
        self._answers: dict[int, bytes | bytearray] = {}
        self._inbox = bytearray()  # answer bytes read and not yet taken (acks are small)

    def send_request(self, request: Request[Any]) -> int:
        """Sends ``request`` (applied to the shard in the order sent); returns its number.

        Raises:
            OSError: the listener's process is gone.
        """
        send_frame(self._sock, codec.pack(request))
        number = self._sent
        self._sent += 1
        return number

    def _answer(self) -> bytes | bytearray | None:
        """The next whole answer already read, or None."""
        inbox = self._inbox
        if len(inbox) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(inbox)
        if size < 0:  # the listener frames answers of a few hundred bytes
            raise OSError(f"an answer's frame header announced {size} bytes: not this channel")
        end = HEADER.size + size
        if len(inbox) < end:
            return None
        answer = inbox[HEADER.size : end]
        del inbox[:end]
        return answer

    def ready(self, number: int, timeout: float | None = None) -> bool:
        """Reads acknowledgements until chunk ``number``'s arrived; False after ``timeout`` s.

        Answers are read in blocks of what has arrived (several at once when the shard
        answered several chunks); a wait with a timeout uses the channel's one selector.

        Raises:
            EOFError, OSError: the listener's process is gone.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._read <= number:
            answer = self._answer()
            if answer is None:
                if deadline is not None:
                    remaining = max(deadline - time.monotonic(), 0.0)
                    if not self._readable.select(remaining):
                        return False
                data = self._sock.recv(_READ_BYTES)
                if not data:
                    raise EOFError("the chunk listener closed the connection")
                self._inbox += data
                continue
            self._answers[self._read] = answer
            self._read += 1
        return True

    def result(self, number: int) -> Any:
        """The shard's answer to chunk ``number`` (once :meth:`ready`); raises what it raised."""
        return codec.answer(self._answers.pop(number))

    def close(self) -> None:
        """Closes the connection (chunks not yet read by the shard may be lost)."""
        self._readable.close()
        self._sock.close()
