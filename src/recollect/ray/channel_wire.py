"""The wire format both ends of the chunk channel share: the handshake bytes, the
framing and the pickling of the shard's answers (see :mod:`recollect.ray.channel`).

Messages are pickled (protocol 5) with :mod:`multiprocessing.connection`'s
length-prefixed framing; a connection first sends ``HELLO`` and the listener's token
and is answered ``ACCEPTED``.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

from recollect.errors import StateError
from recollect.service.wire.endpoint import Raised

__all__ = ["ACCEPTED", "HELLO", "PROTOCOL", "TOKEN_BYTES", "TRANSPORT_ERRORS", "answer"]

#: pickle protocol of chunks and acknowledgements
PROTOCOL = 5
TOKEN_BYTES = 32
HEADER = struct.Struct("!i")  # multiprocessing.connection's frame header
#: the frame header of a handshake: the token's length
HELLO = HEADER.pack(TOKEN_BYTES)
#: the listener's answer to a good handshake (a framed ``b"ok"``)
ACCEPTED = HEADER.pack(2) + b"ok"

#: what a dead or closed peer raises on a connection (EOFError: closed mid-message)
TRANSPORT_ERRORS = (EOFError, OSError)


def answer(value: Any) -> bytes:
    """``value`` pickled; an exception that cannot be pickled comes back as a StateError."""
    try:
        return pickle.dumps(value, PROTOCOL)
    except Exception as err:
        error = value.error if type(value) is Raised else value
        return pickle.dumps(
            Raised(StateError(f"the shard's answer {error!r} could not be sent back ({err!r}).")),
            PROTOCOL,
        )
