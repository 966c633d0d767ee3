"""The framing and handshake both ends of the chunk channel share (see
:mod:`recollect.ray.channel`).

Messages are :mod:`multiprocessing.connection`'s length-prefixed frames (a 4-byte
big-endian length, then the payload), each one request or answer packed by
:mod:`recollect.service.wire.codec` (header values and raw array buffers, no pickle);
a connection first sends ``HELLO`` and the listener's token and is answered
``ACCEPTED``. Both ends read and write the frames on the socket itself:
:func:`send_frame` writes a message's parts with one ``sendmsg`` (no joined copy of
the chunk), :func:`recv_frame` reads a payload straight into its own buffer (no
copies through an intermediate one).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ACCEPTED",
    "HEADER",
    "HELLO",
    "TOKEN_BYTES",
    "TRANSPORT_ERRORS",
    "recv_exactly",
    "recv_frame",
    "send_frame",
]

TOKEN_BYTES = 32
HEADER = struct.Struct("!i")  # multiprocessing.connection's frame header
#: the frame header of a handshake: the token's length
HELLO = HEADER.pack(TOKEN_BYTES)
#: the listener's answer to a good handshake (a framed ``b"ok"``)
ACCEPTED = HEADER.pack(2) + b"ok"
#: frames of more than this many bytes have the header -1 and an 8-byte length
_LONG = 0x7FFFFFFF
_LONG_HEADER = struct.Struct("!Q")

#: what a dead or closed peer raises on a connection (EOFError: closed mid-message)
TRANSPORT_ERRORS = (EOFError, OSError)


def send_frame(sock: socket.socket, parts: Sequence[Any]) -> None:
    """Writes one frame whose payload is ``parts`` (bytes-like, one after another) to
    the blocking ``sock``: one ``sendmsg`` call unless the socket takes it in pieces.

    Raises:
        OSError: the peer is gone.
    """
    views = [memoryview(part).cast("B") for part in parts]
    size = sum(len(view) for view in views)
    header = HEADER.pack(size) if size <= _LONG else HEADER.pack(-1) + _LONG_HEADER.pack(size)
    views.insert(0, memoryview(header))
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):  # drop what went; keep the rest of a part
            sent -= len(views[0])
            del views[0]
        if sent:
            views[0] = views[0][sent:]


def recv_exactly(sock: socket.socket, size: int) -> bytearray:
    """The next ``size`` bytes of the blocking ``sock``.

    Raises:
        EOFError: the peer closed the connection first (mid-message when some came).
        OSError: the connection broke.
    """
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise EOFError(f"the connection closed {got} bytes into a {size}-byte read")
        got += n
    return buffer


def recv_frame(sock: socket.socket) -> bytearray:
    """The payload of the next frame of the blocking ``sock``, in a buffer of its own.

    Raises:
        EOFError: the peer closed the connection (mid-frame or between frames).
        OSError: the connection broke.
    """
    (size,) = HEADER.unpack(recv_exactly(sock, HEADER.size))
    if size == -1:
        (size,) = _LONG_HEADER.unpack(recv_exactly(sock, _LONG_HEADER.size))
    elif size < 0:
        raise OSError(f"a frame header announced {size} bytes: not this channel's framing")
    return recv_exactly(sock, size)
