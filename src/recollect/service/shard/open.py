"""Opening a served table's shards: the tables a service is given, checked, and a shard
restored from its checkpoint (used by the in-process ``Server`` and by ``recollect.ray``)."""

from __future__ import annotations

import os
from typing import Any

from recollect.buffers import ReplayBuffer
from recollect.errors import CheckpointError, InvalidArgumentError
from recollect.service.shard.counters import open_counters
from recollect.service.shard.shard import Shard
from recollect.service.wire.layout import shard_path
from recollect.state.atomic import find_checkpoint

__all__ = ["check_tables", "open_shard"]


def check_tables(tables: Any) -> dict[str, ReplayBuffer]:
    """``tables`` as ``{name: ReplayBuffer}``, checked.

    Raises:
        InvalidArgumentError: not a non-empty mapping of str names to ReplayBuffers.
    """
    if not isinstance(tables, dict) or not tables:
        raise InvalidArgumentError(
            "`tables` must be a non-empty dict {name: ReplayBuffer}; got "
            f"{type(tables).__name__}."
        )
    for name, buf in tables.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise InvalidArgumentError(
                f"table names must be non-empty strings without '/'; got {name!r}."
            )
        if not isinstance(buf, ReplayBuffer) or type(buf) is not ReplayBuffer:
            raise InvalidArgumentError(
                f"table {name!r} must be a recollect.ReplayBuffer; got {type(buf).__name__}."
            )
    return dict(tables)


def open_shard(
    table: str,
    buffer: ReplayBuffer,
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    lease_timeout: float = 60.0,
) -> Shard:
    """A :class:`Shard` of ``buffer``, restored from ``checkpoint_dir`` when it holds one.

    With a ``checkpoint_dir``, the shard keeps ``[inserts, lost steps]`` in a
    memory-mapped file next to its checkpoint, written on every insert; a shard
    restored after a crash counts the inserts made after the checkpoint as lost.

    Raises:
        CheckpointError: the checkpoint is damaged.
        InvalidArgumentError: it holds a buffer of another configuration.
    """
    if checkpoint_dir is None:
        return Shard(table, buffer, lease_timeout=lease_timeout)
    shard = buffer.table.shard
    path = shard_path(checkpoint_dir, table, shard)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if find_checkpoint(path) is not None:  # also the sibling an interrupted save left
            saved = ReplayBuffer.load(path)
            buffer.load_state_dict(saved.state_dict())
        counters = open_counters(path.parent / f"shard-{shard}.counters", buffer.table.inserts)
    except CheckpointError as err:
        raise CheckpointError(f"table {table!r} shard {shard}: {err}") from err
    return Shard(table, buffer, lease_timeout=lease_timeout, counters=counters)
