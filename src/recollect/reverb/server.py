"""``reverb.Server``: hosts tables; clients reach it by ``"localhost:<port>"``.

In the same process the address resolves to the server's
:class:`~recollect.reverb.core.ServerCore` (no socket: a method call). When
``recollect.grpc`` (the ``reverb`` extra, grpcio) is installed the server also
serves the core over gRPC on 127.0.0.1 (other processes on this machine);
serving other interfaces needs ``host=`` and a ``token=`` (Reverb serves every
interface unauthenticated; that is a deliberate difference).
"""

from __future__ import annotations

import collections
import socket
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from recollect.errors import InvalidArgumentError
from recollect.reverb.addresses import LOCAL, LOCAL_LOCK, grpc_transport
from recollect.reverb.core import ServerCore
from recollect.reverb.table import Table

_LIVE: weakref.WeakSet[Server] = weakref.WeakSet()


def _stop_all() -> None:
    """Stops every live server before the interpreter joins threads (a script that never
    calls ``stop()`` still exits, as with Reverb)."""
    for server in list(_LIVE):
        server.stop()


# runs before the interpreter joins non-daemon threads (gRPC's workers); atexit runs after
threading._register_atexit(_stop_all)  # type: ignore[attr-defined]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A replay server hosting ``tables``.

    Args:
        tables: the tables (at least one; distinct names).
        port: the port clients use in their address; None picks a free one.
        checkpointer: a ``reverb.platform.checkpointers_lib`` checkpointer; the server
            restores the latest checkpoint in it at start (None: no checkpoints).
        host: the interface the gRPC transport binds (default 127.0.0.1).
        token: the shared secret needed to serve any other interface.
        serve_grpc: whether to serve other processes (needs grpcio; default: when installed).

    Raises:
        InvalidArgumentError (a ValueError): no tables or duplicate names.
    """

    def __init__(
        self,
        tables: Sequence[Table] | None = None,
        port: int | None = None,
        checkpointer: Any = None,
        *,
        host: str = "127.0.0.1",
        token: str | None = None,
        serve_grpc: bool | None = None,
    ) -> None:
        if not tables:
            raise InvalidArgumentError("At least one table must be provided")
        names = collections.Counter(t.name for t in tables)
        duplicates = [name for name, count in names.items() if count > 1]
        if duplicates:
            raise InvalidArgumentError(
                f"Multiple items in tables have the same name: {', '.join(duplicates)}"
            )
        self._core = ServerCore(list(tables), checkpointer)
        if checkpointer is not None:
            checkpointer.restore(self._core)
        self._grpc = None
        rgrpc = grpc_transport() if serve_grpc is not False else None
        if serve_grpc and rgrpc is None:
            raise InvalidArgumentError(
                "serve_grpc=True needs grpcio and recollect.grpc; pip install 'recollect[reverb]'."
            )
        if rgrpc is not None:
            self._grpc = rgrpc.serve(self._core, host=host, port=port or 0, token=token)
            port = self._grpc.port
        elif port is None:
            port = _free_port()
        self._port = int(port)
        self._stopped = threading.Event()
        with LOCAL_LOCK:
            if self._port in LOCAL and LOCAL[self._port]() is not None:
                raise InvalidArgumentError(
                    f"port {self._port} is already used by a server of this process; pick "
                    "another or pass port=None."
                )
            LOCAL[self._port] = weakref.ref(self._core)
            _LIVE.add(self)

    @property
    def port(self) -> int:
        """The port in this server's address."""
        return self._port

    @property
    def core(self) -> ServerCore:
        return self._core

    def stop(self) -> None:
        """Stops serving: clients can no longer reach this server (idempotent)."""
        with LOCAL_LOCK:
            ref = LOCAL.get(self._port)
            if ref is not None and ref() is self._core:
                del LOCAL[self._port]
        if self._grpc is not None:
            self._grpc.stop()
            self._grpc = None
        self._stopped.set()

    def wait(self) -> None:
        """Blocks until :meth:`stop` is called from another thread."""
        while not self._stopped.wait(1.0):
            pass

    def localhost_client(self) -> Any:
        """A ``Client`` of this server (``"localhost:<port>"``)."""
        from recollect.reverb.client import Client

        return Client(f"localhost:{self._port}")

    def in_process_client(self) -> Any:
        """A ``Client`` of this server that calls it directly (as every client in this
        process does)."""
        return self.localhost_client()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        if hasattr(self, "_stopped"):
            self.stop()

    def __repr__(self) -> str:
        return f"Server(port={self._port}, tables={sorted(self._core.tables)})"
