"""Serve an object's public methods over gRPC: :func:`serve` and its handle, :class:`GrpcServer`.

A call ``channel.call("insert", {"data": ...})`` runs ``target.insert(data=...)`` in one of
the server's threads and sends back its result, or its exception (see
:mod:`recollect.grpc.errors`). Each method is the gRPC method
``/recollect.grpc.Call/<name>`` (unary) or ``/recollect.grpc.Stream/<name>`` (the
method's result iterated, one message per item), with raw bytes both ways
(:mod:`recollect.grpc.codec`), so no ``.proto`` file or ``protoc`` step is needed.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from recollect.arguments import positive_int
from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError
from recollect.grpc.codec import decode, encode
from recollect.grpc.errors import TransportError, error_name, registered_error
from recollect.grpc.options import (
    ERROR_KEY,
    LOOPBACK_HOSTS,
    SERVER_OPTIONS,
    STREAM_SERVICE,
    TOKEN_ENV,
    TOKEN_KEY,
    UNARY_SERVICE,
    check_token,
    load_grpc,
)

__all__ = ["GrpcServer", "serve"]

_log = logging.getLogger(__name__)
_MAX_DETAILS = 4000  # characters of an error message sent back (gRPC metadata is ~8 KiB)


def _public_method(target: object, name: str, allowed: frozenset[str] | None) -> Any:
    if not name.isidentifier() or name.startswith("_"):
        return None
    if allowed is not None and name not in allowed:
        return None
    method = getattr(target, name, None)
    return method if callable(method) else None


def _abort(context: Any, err: Exception) -> None:
    """End the call with ``err``'s class name (trailing metadata) and message (details)."""
    grpc = load_grpc()
    message = str(err)
    if len(message) > _MAX_DETAILS:
        message = message[:_MAX_DETAILS] + " ... (message cut)"
    name = error_name(type(err))
    if registered_error(name) is None:
        _log.debug("served method raised %s", name, exc_info=err)
    context.set_trailing_metadata(((ERROR_KEY, name),))
    context.abort(grpc.StatusCode.UNKNOWN, message)


def _args(request: bytes) -> dict[str, Any]:
    args = decode(request)
    if type(args) is not dict:
        raise InvalidArgumentTypeError(
            f"a call's arguments must be a dict of keyword arguments; got {type(args).__name__}."
        )
    return args


class _Handler:
    """The gRPC generic handler: checks the token, then finds the method by name."""

    def __init__(self, target: object, token: str | None, methods: frozenset[str] | None):
        grpc = load_grpc()
        self._grpc = grpc
        self._target = target
        self._methods = methods
        self._expected = None if token is None else f"Bearer {token}".encode()
        self._refuse = grpc.unary_unary_rpc_method_handler(self._unauthenticated)
        self._refuse_stream = grpc.unary_stream_rpc_method_handler(self._unauthenticated)
        self._handlers: dict[tuple[bool, str], Any] = {}  # found methods' handlers

    # grpc.GenericRpcHandler's one method (duck-typed: grpc only calls it)
    def service(self, details: Any) -> Any:
        service, _, name = details.method.lstrip("/").partition("/")
        if service not in (UNARY_SERVICE, STREAM_SERVICE):
            return None
        streaming = service == STREAM_SERVICE
        if not self._authorized(details.invocation_metadata):
            return self._refuse_stream if streaming else self._refuse
        handler = self._handlers.get((streaming, name))
        if handler is None:
            method = _public_method(self._target, name, self._methods)
            if method is None:
                return None  # gRPC answers UNIMPLEMENTED
            if streaming:
                handler = self._grpc.unary_stream_rpc_method_handler(self._streamer(method))
            else:
                handler = self._grpc.unary_unary_rpc_method_handler(self._caller(method))
            self._handlers[streaming, name] = handler
        return handler

    def _authorized(self, metadata: Iterable[Any] | None) -> bool:
        if self._expected is None:
            return True
        for key, value in metadata or ():
            if key == TOKEN_KEY:
                sent = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(sent, self._expected)
        return False

    def _unauthenticated(self, request: bytes, context: Any) -> bytes:
        context.abort(
            self._grpc.StatusCode.UNAUTHENTICATED,
            f"this server needs a token: pass the server's token to connect(..., token=...) "
            f"or set ${TOKEN_ENV} in the client's environment (the one sent was missing or "
            "wrong).",
        )
        return b""

    @staticmethod
    def _caller(method: Callable[..., Any]) -> Callable[[bytes, Any], bytes]:
        def call(request: bytes, context: Any) -> bytes:
            try:
                return encode(method(**_args(request)))
            except Exception as err:
                _abort(context, err)
                raise  # not reached: abort raises

        return call

    @staticmethod
    def _streamer(method: Callable[..., Any]) -> Callable[[bytes, Any], Iterator[bytes]]:
        def stream(request: bytes, context: Any) -> Iterator[bytes]:
            try:
                for item in method(**_args(request)):
                    yield encode(item)
            except Exception as err:
                _abort(context, err)

        return stream


class GrpcServer:
    """A running gRPC server of one object's public methods (made by :func:`serve`).

    Attributes:
        host: the host it is bound to, as given to :func:`serve`.
        port: the TCP port it listens on (the one chosen when ``port=0``).
    """

    def __init__(self, server: Any, executor: ThreadPoolExecutor, host: str, port: int):
        self._server = server
        self._executor = executor
        self.host = host
        self.port = port
        self._stopped = False

    @property
    def address(self) -> str:
        """``"host:port"`` for :func:`recollect.grpc.connect` (IPv6 hosts in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def stop(self, grace: float | None = None) -> None:
        """Stop serving; calls in flight get ``grace`` seconds (None: cancelled now).

        Blocks until the server has stopped. Stopping twice is a no-op.
        """
        if self._stopped:
            return
        self._stopped = True
        self._server.stop(grace).wait()
        self._executor.shutdown(wait=False)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout`` seconds pass); whether it stopped."""
        return bool(self._server.wait_for_termination(timeout))

    def __enter__(self) -> GrpcServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "serving"
        return f"GrpcServer(address={self.address!r}, {state})"


def serve(
    target: object,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    *,
    methods: Iterable[str] | None = None,
    max_workers: int = 128,
) -> GrpcServer:
    """Serve ``target``'s public methods over gRPC at ``host:port``; returns the running server.

    A client (:func:`recollect.grpc.connect`) calls ``getattr(target, name)(**args)`` by
    name. Names starting with ``_``, names not in ``methods`` (when given) and attributes
    that are not callable are refused (the client raises
    :class:`~recollect.grpc.UnknownMethodError`). Each call runs in a thread of a
    pool of ``max_workers``: a call that blocks (an insert waiting on a rate limiter) holds
    one, so keep it above the number of calls that may block at once.

    Security: the default host is 127.0.0.1 (this machine only). Any other host (e.g.
    ``"0.0.0.0"``, all interfaces) needs a ``token`` of at least 16 characters, which
    every call must carry (clients pass it or read ``$RECOLLECT_REVERB_TOKEN``); with a
    token, a loopback server checks it too. The channel is not encrypted: the token keeps
    out callers that do not know it, not eavesdroppers on the network.

    Args:
        target: the object whose methods are served.
        host: the interface to bind: 127.0.0.1, localhost, ::1, or (with a token) any other.
        port: the TCP port; 0 picks a free one (read it from ``.port``).
        token: the shared secret calls must carry, e.g. ``secrets.token_urlsafe(32)``.
        methods: serve only these method names (default: every public method).
        max_workers: the most calls served at once.

    Raises:
        recollect.errors.InvalidArgumentError: a non-loopback host without a token, a
            short token, or a bad port.
        recollect.grpc.errors.TransportError: the address cannot be bound (port in use).
        recollect.extras.MissingExtraError: grpcio is not installed.
    """
    if not isinstance(host, str) or not host:
        raise InvalidArgumentTypeError(f"host must be a non-empty str; got {host!r}.")
    if type(port) is not int or not 0 <= port <= 65535:
        raise InvalidArgumentError(f"port must be an int in [0, 65535]; got {port!r}.")
    if token is not None:
        check_token(token)
    elif host not in LOOPBACK_HOSTS:
        raise InvalidArgumentError(
            f"serving on host={host!r} needs a token: anyone who can reach that interface "
            "could otherwise call the server. Pass token=secrets.token_urlsafe(32) and give "
            f"clients the same token (connect(..., token=...) or ${TOKEN_ENV}), or serve on "
            "127.0.0.1 (this machine only)."
        )
    positive_int("max_workers", max_workers)
    allowed = None if methods is None else frozenset(methods)
    grpc = load_grpc()
    executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="recollect-grpc")
    server = grpc.server(
        executor, handlers=[_Handler(target, token, allowed)], options=SERVER_OPTIONS
    )
    bind = "127.0.0.1" if host == "localhost" else host
    bind = f"[{bind}]" if ":" in bind else bind
    try:
        bound = server.add_insecure_port(f"{bind}:{port}")
    except RuntimeError as err:
        bound = 0
        cause: Exception | None = err
    else:
        cause = None
    if not bound:
        executor.shutdown(wait=False)
        raise TransportError(
            f"cannot serve on {bind}:{port}: the address is in use or not an interface of "
            "this machine. Pick another port (port=0 picks a free one) or host."
        ) from cause
    server.start()
    return GrpcServer(server, executor, host, bound)
