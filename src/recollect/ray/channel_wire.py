"""The handshake both ends of the chunk channel share (see :mod:`recollect.ray.channel`).

Messages are :mod:`multiprocessing.connection`'s length-prefixed frames, each one
request or answer packed by :mod:`recollect.service.wire.codec` (header values and raw
array buffers, no pickle); a connection first sends ``HELLO`` and the listener's token
and is answered ``ACCEPTED``.
"""

from __future__ import annotations

import struct

__all__ = ["ACCEPTED", "HELLO", "TOKEN_BYTES", "TRANSPORT_ERRORS"]

TOKEN_BYTES = 32
HEADER = struct.Struct("!i")  # multiprocessing.connection's frame header
#: the frame header of a handshake: the token's length
HELLO = HEADER.pack(TOKEN_BYTES)
#: the listener's answer to a good handshake (a framed ``b"ok"``)
ACCEPTED = HEADER.pack(2) + b"ok"

#: what a dead or closed peer raises on a connection (EOFError: closed mid-message)
TRANSPORT_ERRORS = (EOFError, OSError)
