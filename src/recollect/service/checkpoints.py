"""A service checkpoint: saving every shard's buffer and the service manifest, and
opening a shard from it (:func:`open_shard`).

Layout: ``directory/<table>/shard-<k>/`` (a ``ReplayBuffer`` checkpoint each,
:func:`~recollect.service.shard.shard_path`) and ``directory/service.json``
(:data:`MANIFEST`: ``{"tables": {table: {"num_shards": n}}}``), written last and
atomically, so a directory with a manifest holds every shard.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from recollect.buffers import ReplayBuffer
from recollect.errors import CheckpointError
from recollect.service.counters import open_counters
from recollect.service.endpoint import Endpoint, gather
from recollect.service.shard import Shard, shard_path
from recollect.state.atomic import find_checkpoint

__all__ = ["MANIFEST", "open_shard", "save_shards"]

#: name of the service manifest in a checkpoint directory
MANIFEST = "service.json"


def save_shards(directory: Path, tables: Mapping[str, Sequence[Endpoint]]) -> Path:
    """Checkpoints every shard of ``tables`` under ``directory`` (a table's shards in
    parallel), then writes the manifest; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for table, endpoints in tables.items():
        handles = [e.save(str(shard_path(directory, table, e.shard))) for e in endpoints]
        gather(endpoints, handles, None)
    manifest = {"tables": {t: {"num_shards": len(e)} for t, e in tables.items()}}
    tmp = directory / f".{MANIFEST}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, directory / MANIFEST)
    return directory


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
