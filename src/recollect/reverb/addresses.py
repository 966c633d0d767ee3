"""Where a Reverb address leads: a server of this process (by port) or, through
``recollect.grpc``, another process. Shared by the server (which registers itself) and the
client (which resolves addresses)."""

from __future__ import annotations

import importlib
import importlib.util
import socket
import threading
import weakref
from typing import TYPE_CHECKING, Any

from recollect.errors import InvalidArgumentError

if TYPE_CHECKING:
    from recollect.reverb.core import ServerCore

__all__ = ["LOCAL", "LOCAL_LOCK", "grpc_transport", "local_core"]

#: the cores of this process's servers by port (held weakly)
LOCAL: dict[int, weakref.ReferenceType[ServerCore]] = {}
LOCAL_LOCK = threading.Lock()
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0", ""}


def local_core(address: str) -> ServerCore | None:
    """The core of a server of this process at ``address`` (``host:port``), or None."""
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise InvalidArgumentError(
            f"server_address must be 'host:port'; got {address!r}. Use e.g. 'localhost:8000'."
        )
    if host not in LOCAL_HOSTS and host != socket.gethostname():
        return None
    with LOCAL_LOCK:
        ref = LOCAL.get(int(port))
    return ref() if ref is not None else None


def grpc_transport() -> Any:
    """``recollect.grpc`` when it and grpcio import, else None."""
    if importlib.util.find_spec("grpc") is None:
        return None
    try:
        return importlib.import_module("recollect.grpc")
    except ImportError:
        return None
