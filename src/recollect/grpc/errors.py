"""Errors of the gRPC transport, and the registry of errors that cross it with their class.

Transport failures (nothing listening, a deadline, a refused token, an unknown method)
raise the classes below. An exception raised by the served object travels back to the
caller: as its own class when that class is registered (every class of
:mod:`recollect.errors` and of this module is; :func:`register_error` adds more, on both
sides), else as :class:`RemoteError` naming the remote class. Classes are looked up by
name in the registry only: nothing named on the wire is ever imported.
"""

from __future__ import annotations

import inspect
from typing import TypeVar

from recollect import errors as _recollect_errors
from recollect.errors import RecollectError

__all__ = [
    "DeadlineExceededError",
    "RemoteError",
    "TransportError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnknownMethodError",
    "WireFormatError",
    "error_name",
    "register_error",
    "registered_error",
]


class TransportError(RecollectError, ConnectionError):
    """A call could not be delivered or answered (base class of the transport's failures)."""


class DeadlineExceededError(TransportError, TimeoutError):
    """A call did not complete within its ``timeout`` (also: nothing listens at the address).

    The client waits for the server to come up until the deadline, as Reverb's client does,
    so a call to an address where nothing listens raises this after ``timeout`` seconds.
    """


class UnavailableError(TransportError):
    """The server is not reachable (refused or lost connection) and the call was not waiting
    for it (``connect(..., wait_for_ready=False)``), or it stopped during the call."""


class UnauthenticatedError(TransportError, PermissionError):
    """The server refused the call: its token was missing or wrong."""


class UnknownMethodError(RecollectError, AttributeError):
    """The served object has no public method of that name (private names are refused)."""


class WireFormatError(RecollectError, ValueError):
    """A message is not in the transport's format (damaged, or from another program)."""


class RemoteError(RecollectError, RuntimeError):
    """The served object raised an exception whose class is not registered on this side.

    Attributes:
        remote_type: the remote class, ``"module.QualName"`` (e.g. ``"builtins.KeyError"``).
        remote_message: ``str()`` of the remote exception.
    """

    def __init__(self, message: str, remote_type: str = "", remote_message: str = "") -> None:
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_message = remote_message


_REGISTRY: dict[str, type[BaseException]] = {}
_E = TypeVar("_E", bound=BaseException)


def error_name(cls: type[BaseException]) -> str:
    """The name a class travels under: ``"module.QualName"``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register_error(cls: type[_E]) -> type[_E]:
    """Let exceptions of ``cls`` cross the transport with their class (usable as a decorator).

    Register the class in the server's and in the client's process (importing the module
    that defines and registers it does both). Its constructor must accept one message
    argument (else it is rebuilt without calling ``__init__``, with ``args = (message,)``).

    Raises:
        recollect.errors.InvalidArgumentTypeError: ``cls`` is not an exception class.
    """
    if not (inspect.isclass(cls) and issubclass(cls, Exception)):
        raise _recollect_errors.InvalidArgumentTypeError(
            f"register_error takes an exception class (a subclass of Exception); got {cls!r}."
        )
    _REGISTRY[error_name(cls)] = cls
    return cls


def registered_error(name: str) -> type[BaseException] | None:
    """The registered class travelling under ``name``, or None."""
    return _REGISTRY.get(name)


def _register_module(module: object) -> None:
    for value in list(vars(module).values()):
        if inspect.isclass(value) and issubclass(value, RecollectError):
            register_error(value)


_register_module(_recollect_errors)
for _cls in (
    TransportError,
    DeadlineExceededError,
    UnavailableError,
    UnauthenticatedError,
    UnknownMethodError,
    WireFormatError,
):
    register_error(_cls)
