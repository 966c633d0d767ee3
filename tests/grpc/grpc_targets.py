"""Objects the gRPC transport tests serve, importable by a spawned child process."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from recollect.errors import ShapeError
from recollect.grpc import register_error, serve


@register_error
class TargetError(RuntimeError):
    """A non-recollect error class registered with the transport (in both processes)."""


@register_error
class TwoArgumentError(ValueError):
    """Its constructor does not take a message alone: rebuilt without calling __init__."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{text} (code {code})")


class Target:
    """Echoes, raises and streams on request; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.hidden = "not callable"

    def echo(self, **kwargs: Any) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
        return kwargs

    def noop(self) -> None:
        return None

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def shape_error(self, message: str) -> None:
        raise ShapeError(message)

    def target_error(self, message: str) -> None:
        raise TargetError(message)

    def two_argument_error(self) -> None:
        raise TwoArgumentError(7, "odd constructor")

    def key_error(self) -> None:
        raise KeyError("missing-key")

    def unsendable(self) -> object:
        return {"ok": 1, "bad": [object()]}

    def count(self, n: int) -> Any:
        return (np.full(i, i, dtype=np.int32) for i in range(n))

    def count_then_fail(self, n: int) -> Any:
        yield from range(n)
        raise ShapeError(f"failed after {n} items")

    def sleep(self, seconds: float) -> float:
        threading.Event().wait(seconds)
        return seconds

    def _private(self) -> str:
        return "private"


def serve_in_child(conn: Any, token: str | None) -> None:
    """Serve a Target on 127.0.0.1, send the address through ``conn``, stop on a message."""
    with serve(Target(), token=token) as server:
        conn.send(server.address)
        conn.recv()  # any message: stop


def call_in_child(channel: Any, conn: Any) -> None:
    """Call ``echo`` through a channel that arrived pickled; send the result back."""
    try:
        conn.send(channel.call("echo", {"where": "child"}, timeout=30.0))
    except BaseException as err:
        conn.send(repr(err))
