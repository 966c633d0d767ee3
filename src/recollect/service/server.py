"""Server: tables served in-process (threads), the embedded default of the replay service.

It joins the two sides in one process: it opens the shards (:mod:`recollect.service.shard`)
and hands out a :class:`~recollect.service.client.Client` whose endpoints apply each
request to its shard directly (:class:`~recollect.service.wire.endpoint.LocalEndpoint`).
"""

from __future__ import annotations

import os
from typing import Any

from recollect.buffers import ReplayBuffer
from recollect.errors import InvalidArgumentError
from recollect.service.client import Client
from recollect.service.shard import Shard, check_tables, open_shard, shard_config
from recollect.service.wire.endpoint import LocalEndpoint

__all__ = ["Server"]


class Server:
    """Serves ``{name: ReplayBuffer}`` tables to clients of this process (threads).

    Each buffer keeps its sampler, rate limiter and ``max_times_sampled``. With
    ``num_shards=1`` (default) the given buffer is the table; with more, each
    table is split into ``num_shards`` new buffers built from its configuration
    (rows and capacity split evenly; the given buffer must be empty), which
    clients sample exactly as one (see :class:`~recollect.service.Client`).

    Args:
        tables: ``{name: ReplayBuffer}``.
        num_shards: shards per table.
        checkpoint_dir: restore each shard from ``checkpoint_dir/<table>/shard-<k>``
            when present; the default directory of ``client.checkpoint()``.
        lease_timeout: seconds without a write after which a writer's rows may
            pass to a new writer that finds no free row.

    Raises:
        InvalidArgumentError: bad tables, a table not splittable into ``num_shards``,
            or a non-empty buffer to split.
        CheckpointError: a damaged checkpoint in ``checkpoint_dir``.
    """

    def __init__(
        self,
        tables: dict[str, ReplayBuffer],
        *,
        num_shards: int = 1,
        checkpoint_dir: str | os.PathLike | None = None,
        lease_timeout: float = 60.0,
    ) -> None:
        tables = check_tables(tables)
        self.checkpoint_dir = checkpoint_dir
        self.shards: dict[str, list[Shard]] = {}
        for name, buf in tables.items():
            if num_shards == 1:
                buffers = [buf]
            else:
                if len(buf):
                    raise InvalidArgumentError(
                        f"table {name!r} holds {len(buf)} steps; a table split into "
                        f"num_shards={num_shards} is built empty from the buffer's configuration."
                    )
                config = buf.config()
                buffers = [
                    ReplayBuffer.from_config(shard_config(config, num_shards, k, name))
                    for k in range(num_shards)
                ]
            self.shards[name] = [
                open_shard(name, b, checkpoint_dir=checkpoint_dir, lease_timeout=lease_timeout)
                for b in buffers
            ]
        self._closed = False

    def client(self, *, rng: Any = None) -> Client:
        """A :class:`~recollect.service.Client` of these tables (any number, any thread)."""
        return Client(
            {name: [LocalEndpoint(s) for s in shards] for name, shards in self.shards.items()},
            checkpoint_dir=self.checkpoint_dir,
            rng=rng,
        )

    def close(self) -> None:
        """Wakes waiting inserts and samples with StateError; flushes memmap storage."""
        if not self._closed:
            self._closed = True
            for shards in self.shards.values():
                for shard in shards:
                    shard.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Server(tables={ {n: len(s) for n, s in self.shards.items()} })"
