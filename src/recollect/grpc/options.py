"""Constants both sides share, and the import of grpcio (an extra: ``recollect[reverb]``)."""

from __future__ import annotations

import functools
import os
from types import ModuleType

from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError
from recollect.extras import missing_extra

__all__ = [
    "LOOPBACK_HOSTS",
    "MAX_MESSAGE_BYTES",
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "check_token",
    "load_grpc",
    "token_from_env",
]

#: the environment variable clients read their token from when none is passed
TOKEN_ENV = "RECOLLECT_REVERB_TOKEN"
#: the largest message either side sends or accepts (1 GiB)
MAX_MESSAGE_BYTES = 1 << 30
#: hosts a server may bind without a token
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: tokens shorter than this are refused (``secrets.token_urlsafe(32)`` makes a good one)
MIN_TOKEN_LENGTH = 16

#: the gRPC service names: unary calls and server-streaming calls
UNARY_SERVICE = "recollect.grpc.Call"
STREAM_SERVICE = "recollect.grpc.Stream"
#: the call metadata carrying the token, and the trailing metadata of a remote error
TOKEN_KEY = "authorization"
ERROR_KEY = "recollect-error"

#: both sides: 1 GiB messages; a fixed 8 MiB HTTP/2 stream window instead of gRPC's
#: bandwidth-delay probing (which starts at 64 KiB: a 10 MB loopback round trip ran about
#: 2x slower with it)
_COMMON_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 8 << 20),
)
#: channel arguments: reconnect within 1 s of a server coming up (gRPC's default backoff
#: grows to 120 s)
CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    *_COMMON_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
#: server arguments: as the channel's, and a port in use is an error, not shared
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    *_COMMON_OPTIONS,
    ("grpc.so_reuseport", 0),
)


@functools.cache
def load_grpc() -> ModuleType:
    """The ``grpc`` module (grpcio).

    Raises:
        recollect.extras.MissingExtraError: grpcio is not installed (names the extra).
    """
    try:
        import grpc
    except ImportError as err:
        raise missing_extra(err, "recollect.grpc") from err
    if not hasattr(grpc, "server"):  # a folder named grpc on sys.path, not grpcio
        missing = ModuleNotFoundError("No module named 'grpc'", name="grpc")
        raise missing_extra(missing, "recollect.grpc")
    return grpc


def check_token(token: object) -> str:
    """``token`` if it is a usable token, else an error saying what a token must be.

    Raises:
        recollect.errors.InvalidArgumentTypeError: not a str.
        recollect.errors.InvalidArgumentError: too short, or not printable ASCII.
    """
    if not isinstance(token, str):
        raise InvalidArgumentTypeError(
            f"token must be a str; got {type(token).__name__}. Make one with "
            "secrets.token_urlsafe(32)."
        )
    if len(token) < MIN_TOKEN_LENGTH or not (token.isascii() and token.isprintable()):
        raise InvalidArgumentError(
            f"token must be at least {MIN_TOKEN_LENGTH} printable ASCII characters; got "
            f"{len(token)} characters{'' if token.isascii() else ' (not ASCII)'}. Make one "
            "with secrets.token_urlsafe(32)."
        )
    return token


def token_from_env() -> str | None:
    """The token in ``$RECOLLECT_REVERB_TOKEN`` (checked), or None when unset or empty."""
    token = os.environ.get(TOKEN_ENV) or None
    return None if token is None else check_token(token)
