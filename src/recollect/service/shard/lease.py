"""Lease: the rows of a shard one writer holds, how the shard tells its writer is gone, and
the order in which the shard stores a lease's chunks (:class:`ChunkOrder`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
from collections.abc import Iterator

import numpy as np

from recollect.errors import StateError

__all__ = ["ChunkOrder", "Lease"]


@dataclasses.dataclass
class Lease:
    """Rows reserved by one writer.

    Attributes:
        lease_id: positive int below 2**62, drawn at random, so an id from
            before a restart of the shard never names a lease after it.
        rows: int64 ``[k]`` the leased rows.
        host: host name of the writer's process.
        pid: process id of the writer.
        last_active: ``time.monotonic()`` of the reservation or the last write.
    """

    lease_id: int
    rows: np.ndarray
    host: str
    pid: int
    last_active: float

    def is_dead(self, now: float, timeout: float) -> bool:
        """Whether the writer is gone: its process died on this host, or it idled ``timeout`` s."""
        if now - self.last_active > timeout:
            return True
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


class ChunkOrder:
    """The order in which a lease's chunks are stored: the one numbered ``seq`` after ``seq - 1``.

    A transport may start a writer's chunks in any order (Ray starts the calls
    of a threaded actor in no guaranteed order: chunk 1 of a row was seen stored
    before chunk 0). Each chunk carries its number in the lease (the writer
    counts them from 0); :meth:`turn` waits until the chunk before it was stored.

    Args:
        table, shard: named in the error of a chunk that waited too long.
        timeout: seconds a chunk waits for the one before it.
    """

    def __init__(self, table: str, shard: int, timeout: float) -> None:
        self.table = table
        self.shard = shard
        self.timeout = timeout
        self._next: dict[int, int] = {}  # lease id -> number of its next chunk
        self._changed = threading.Condition()

    def open(self, lease_id: int) -> None:
        """A new lease: its next chunk is number 0."""
        with self._changed:
            self._next[lease_id] = 0

    def close(self, lease_id: int) -> None:
        """The lease is gone: chunks waiting for their turn go on (and fail on the lease)."""
        with self._changed:
            self._next.pop(lease_id, None)
            self._changed.notify_all()

    @contextlib.contextmanager
    def turn(self, lease_id: int, seq: int | None) -> Iterator[None]:
        """Holds chunk ``seq`` of ``lease_id`` until the one before it was stored, then lets
        the next one go when the block ends (stored or failed); None: no order.

        Raises:
            StateError: chunk ``seq - 1`` did not come within ``timeout`` seconds.
        """
        if seq is None:
            yield
            return
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._next.get(lease_id, seq) == seq, self.timeout
            ):
                raise StateError(
                    f"table {self.table!r} shard {self.shard}: chunk {seq} of writer "
                    f"lease {lease_id} waited {self.timeout:g} s for chunk "
                    f"{self._next.get(lease_id)} of that lease, which never arrived; the "
                    "writer's earlier chunks were lost. Open a new writer."
                )
        try:
            yield
        finally:
            with self._changed:
                if lease_id in self._next:
                    self._next[lease_id] = seq + 1
                    self._changed.notify_all()
