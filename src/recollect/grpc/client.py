"""The client side: :func:`connect` gives a :class:`GrpcChannel` to a :func:`serve`-d object.

A channel opens its gRPC connection on first use, once per process: a copy made by
``fork`` or by pickling (only the address, the explicit token and the options travel)
opens its own. gRPC status codes become :mod:`recollect.grpc.errors` classes; an exception
raised by the served method comes back as its class when registered.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

from recollect.arguments import is_number
from recollect.errors import InvalidArgumentError, InvalidArgumentTypeError
from recollect.grpc import errors
from recollect.grpc.codec import decode, encode
from recollect.grpc.options import (
    CHANNEL_OPTIONS,
    ERROR_KEY,
    MAX_MESSAGE_BYTES,
    STREAM_SERVICE,
    TOKEN_KEY,
    UNARY_SERVICE,
    check_token,
    load_grpc,
    token_from_env,
)

__all__ = ["GrpcChannel", "connect"]

# Connections a forked child inherited: kept referenced so that their finalizers never run
# in the child (closing a parent's gRPC channel there is not safe).
_INHERITED: list[Any] = []


class _Connection:
    """One process's gRPC channel and its per-method callables."""

    def __init__(self, address: str, token: str | None) -> None:
        self.pid = os.getpid()
        self.grpc = load_grpc()
        self.channel = self.grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.metadata = None if token is None else ((TOKEN_KEY, f"Bearer {token}"),)
        self.unary: dict[str, Any] = {}
        self.streams: dict[str, Any] = {}

    def unary_stub(self, method: str) -> Any:
        stub = self.unary.get(method)
        if stub is None:
            stub = self.unary[method] = self.channel.unary_unary(f"/{UNARY_SERVICE}/{method}")
        return stub

    def stream_stub(self, method: str) -> Any:
        stub = self.streams.get(method)
        if stub is None:
            stub = self.channel.unary_stream(f"/{STREAM_SERVICE}/{method}")
            self.streams[method] = stub
        return stub


def _rebuild(cls: type[BaseException], message: str) -> BaseException:
    try:
        return cls(message)
    except Exception:
        err = cls.__new__(cls)
        err.args = (message,)
        return err


class GrpcChannel:
    """A :class:`~recollect.grpc.Channel` to an object served at ``"host:port"``.

    Thread-safe (one gRPC connection serves all threads), picklable and fork-safe. Results'
    arrays are read-only views of the received message (``arr.copy()`` to write).
    """

    def __init__(self, address: str, token: str | None = None, *, wait_for_ready: bool = True):
        self._address = address
        self._token = token
        self._wait_for_ready = wait_for_ready
        self._connection: _Connection | None = None
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    @property
    def address(self) -> str:
        """The ``"host:port"`` this channel calls."""
        return self._address

    def _connect(self) -> _Connection:
        pid = os.getpid()
        connection = self._connection
        if connection is not None and connection.pid == pid:
            return connection
        if self._lock_pid != pid:  # a forked child: the parent's lock may be held forever
            self._lock = threading.Lock()
            self._lock_pid = pid
        with self._lock:
            connection = self._connection
            if connection is not None and connection.pid == pid:
                return connection
            if connection is not None:
                _INHERITED.append(connection)
            token = self._token if self._token is not None else token_from_env()
            connection = _Connection(self._address, token)
            self._connection = connection
            return connection

    def _request(self, method: str, args: dict[str, Any], timeout: float | None) -> bytes:
        if type(method) is not str:
            raise InvalidArgumentTypeError(f"method must be a str; got {method!r}.")
        if type(args) is not dict:
            raise InvalidArgumentTypeError(
                f"args must be a dict of keyword arguments for {method}(); got "
                f"{type(args).__name__}."
            )
        if timeout is not None and not (is_number(timeout) and timeout >= 0):
            raise InvalidArgumentError(
                f"timeout must be None or seconds >= 0; got {timeout!r} for {method}()."
            )
        request = encode(args)
        if len(request) > MAX_MESSAGE_BYTES:
            raise InvalidArgumentError(
                f"the arguments of {method}() make a {len(request)}-byte message, over the "
                f"transport's limit of {MAX_MESSAGE_BYTES} bytes (1 GiB). Send them in "
                "several calls."
            )
        return request

    def call(self, method: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        """``target.<method>(**args)`` on the server; see :meth:`Channel.call`."""
        request = self._request(method, args, timeout)
        connection = self._connect()
        try:
            response = connection.unary_stub(method)(
                request,
                timeout=timeout,
                metadata=connection.metadata,
                wait_for_ready=self._wait_for_ready,
            )
        except connection.grpc.RpcError as err:
            raise self._error(err, method, timeout) from _cause(err)
        return decode(response)

    def stream(
        self, method: str, args: dict[str, Any], timeout: float | None = None
    ) -> Iterator[Any]:
        """Iterate ``target.<method>(**args)`` on the server; see :meth:`StreamChannel.stream`.

        The call starts at once; closing the iterator early cancels it.
        """
        request = self._request(method, args, timeout)
        connection = self._connect()
        responses = connection.stream_stub(method)(
            request,
            timeout=timeout,
            metadata=connection.metadata,
            wait_for_ready=self._wait_for_ready,
        )
        return self._items(responses, connection, method, timeout)

    def _items(
        self, responses: Any, connection: _Connection, method: str, timeout: float | None
    ) -> Iterator[Any]:
        try:
            for response in responses:
                yield decode(response)
        except connection.grpc.RpcError as err:
            raise self._error(err, method, timeout) from _cause(err)
        finally:
            responses.cancel()

    def _error(self, err: Any, method: str, timeout: float | None) -> BaseException:
        """The recollect error for a failed call (``err`` is a grpc.RpcError and grpc.Call)."""
        grpc = load_grpc()
        code, details = err.code(), err.details() or ""
        remote = dict(err.trailing_metadata() or ()).get(ERROR_KEY)
        where = f"{method}() on the server at {self._address}"
        if remote is not None:
            cls = errors.registered_error(remote)
            if cls is not None:
                return _rebuild(cls, details)
            return errors.RemoteError(f"{remote} raised by {where}: {details}", remote, details)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return errors.DeadlineExceededError(
                f"{where} did not complete within timeout={timeout} s: the server is busy or "
                f"blocked, or nothing listens at {self._address} (gRPC: {details})."
            )
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return errors.UnauthenticatedError(f"{where} was refused: {details}")
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return errors.UnknownMethodError(
                f"{where}: the served object has no public method {method!r} (names starting "
                "with '_' and names outside serve(methods=...) are refused). Check the name."
            )
        if code == grpc.StatusCode.UNAVAILABLE:
            return errors.UnavailableError(
                f"{where} failed: the server is unreachable or stopped ({details}). Start it "
                "or check the address; connect(..., wait_for_ready=True) waits for it."
            )
        return errors.TransportError(f"{where} failed: {code.name}: {details}")

    def close(self) -> None:
        """Close this process's connection (a later call opens a new one)."""
        connection, self._connection = self._connection, None
        if connection is not None and connection.pid == os.getpid():
            connection.channel.close()

    def __enter__(self) -> GrpcChannel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "address": self._address,
            "token": self._token,
            "wait_for_ready": self._wait_for_ready,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        GrpcChannel.__init__(
            self, state["address"], state["token"], wait_for_ready=state["wait_for_ready"]
        )

    def __repr__(self) -> str:
        return f"GrpcChannel(address={self._address!r})"


def _cause(err: Any) -> BaseException | None:
    """Keep the gRPC error as the cause of transport failures, not of remote exceptions."""
    return None if dict(err.trailing_metadata() or ()).get(ERROR_KEY) else err


def connect(address: str, token: str | None = None, *, wait_for_ready: bool = True) -> GrpcChannel:
    """A channel to the object served (by :func:`recollect.grpc.serve`) at ``address``.

    Nothing is sent until the first call. With ``wait_for_ready`` (the default, as Reverb's
    client) a call waits for the server to come up until its ``timeout`` and then raises
    :class:`~recollect.grpc.DeadlineExceededError`; without it, a call to an address
    where nothing listens raises :class:`~recollect.grpc.UnavailableError` at once.

    Args:
        address: ``"host:port"`` (IPv6: ``"[::1]:port"``).
        token: the server's token; None reads ``$RECOLLECT_REVERB_TOKEN`` when the
            connection opens (None or empty there: no token sent).
        wait_for_ready: wait for an unreachable server until the call's timeout.

    Raises:
        recollect.errors.InvalidArgumentError: ``address`` is not ``"host:port"``, or a bad
            token.
    """
    if not isinstance(address, str):
        raise InvalidArgumentTypeError(f'address must be a "host:port" str; got {address!r}.')
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidArgumentError(
            f'address must be "host:port" (e.g. "localhost:8000"); got {address!r}.'
        )
    if token is not None:
        check_token(token)
    return GrpcChannel(address, token, wait_for_ready=wait_for_ready)
