"""What a caller of a served object needs: :class:`Channel` (and :class:`StreamChannel`).

A channel calls methods of an object by name with keyword arguments and returns their
result. :class:`~recollect.grpc.GrpcChannel` does it across processes and machines;
an in-process implementation can call the object directly. Arguments and results are nests
the codec carries (:mod:`recollect.grpc.codec`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

__all__ = ["Channel", "StreamChannel"]


@runtime_checkable
class Channel(Protocol):
    """Calls a served object's methods by name."""

    def call(self, method: str, args: dict[str, Any], timeout: float | None = None) -> Any:
        """``target.<method>(**args)`` on the served object; returns its result.

        Args:
            method: a public method name of the served object.
            args: its keyword arguments (a nest the codec carries).
            timeout: seconds to wait for the result (None: no limit).

        Raises:
            recollect.grpc.DeadlineExceededError: no result within ``timeout``
                (also when nothing listens at the address).
            recollect.grpc.UnknownMethodError: no such public method.
            recollect.grpc.errors.UnauthenticatedError: the server refused the token.
            recollect.grpc.RemoteError: the method raised an unregistered exception;
                a registered one (every recollect error) is raised as its own class.
        """
        ...


@runtime_checkable
class StreamChannel(Channel, Protocol):
    """A :class:`Channel` that can also stream the items of an iterable result."""

    def stream(
        self, method: str, args: dict[str, Any], timeout: float | None = None
    ) -> Iterator[Any]:
        """Iterate ``target.<method>(**args)`` on the server, one message per item.

        ``timeout`` bounds the whole stream. Errors are those of :meth:`Channel.call`, raised
        by the iteration.
        """
        ...
