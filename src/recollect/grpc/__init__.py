"""A gRPC transport: serve an object's methods, call them from other processes and machines.

::

    from recollect import grpc as rg

    with rg.serve(table) as server:              # 127.0.0.1, a free port
        channel = rg.connect(server.address)     # "127.0.0.1:<port>", from any process
        channel.call("insert", {"data": np.zeros((4, 3), np.float32)}, timeout=5.0)

Built on grpcio (the extra ``recollect[reverb]``; imported on first use): HTTP/2, one
``/recollect.grpc.Call/<method>`` gRPC method per served method, raw bytes both ways, no
``.proto`` step. Arguments and results are nests of numpy arrays and plain values, sent
as a JSON header plus the arrays' raw bytes (:mod:`recollect.grpc.codec`); never pickled.

- :func:`serve` / :class:`GrpcServer`: the server (loopback by default; any other host
  needs a token, which every call must carry).
- :func:`connect` / :class:`GrpcChannel`: the client, implementing :class:`Channel` (and
  :class:`StreamChannel`); picklable and fork-safe; reads its token from the argument or
  ``$RECOLLECT_REVERB_TOKEN`` (:data:`TOKEN_ENV`).
- Errors (:mod:`recollect.grpc.errors`): :class:`DeadlineExceededError` (timeouts,
  nothing listening), :class:`UnavailableError`, :class:`UnauthenticatedError`,
  :class:`UnknownMethodError`, :class:`RemoteError`; exceptions of classes registered with
  :func:`register_error` (every recollect error is) cross with their class.
"""

from __future__ import annotations

from recollect.grpc.channel import Channel, StreamChannel
from recollect.grpc.client import GrpcChannel, connect
from recollect.grpc.codec import decode, encode
from recollect.grpc.errors import (
    DeadlineExceededError,
    RemoteError,
    TransportError,
    UnauthenticatedError,
    UnavailableError,
    UnknownMethodError,
    WireFormatError,
    register_error,
)
from recollect.grpc.options import MAX_MESSAGE_BYTES, TOKEN_ENV, token_from_env
from recollect.grpc.server import GrpcServer, serve

__all__ = [
    "MAX_MESSAGE_BYTES",
    "TOKEN_ENV",
    "Channel",
    "DeadlineExceededError",
    "GrpcChannel",
    "GrpcServer",
    "RemoteError",
    "StreamChannel",
    "TransportError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnknownMethodError",
    "WireFormatError",
    "connect",
    "decode",
    "encode",
    "register_error",
    "serve",
    "token_from_env",
]
