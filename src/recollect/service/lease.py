"""Lease: the rows of a shard one writer holds, and how the shard tells its writer is gone."""

from __future__ import annotations

import dataclasses
import os
import socket

import numpy as np

__all__ = ["Lease"]


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
