"""A service checkpoint: every shard's buffer checkpoint and the service manifest
(``recollect.service.shard.open_shard`` opens a shard from it).

Layout: ``directory/<table>/shard-<k>/`` (a ``ReplayBuffer`` checkpoint each,
:func:`shard_path`) and ``directory/service.json``
(:data:`MANIFEST`: ``{"tables": {table: {"num_shards": n}}}``), written last and
atomically, so a directory with a manifest holds every shard.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from recollect.service.client.calls import gather
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint
from recollect.service.wire.layout import MANIFEST, shard_path

__all__ = ["MANIFEST", "save_shards"]


def save_shards(directory: Path, tables: Mapping[str, Sequence[Endpoint]]) -> Path:
    """Checkpoints every shard of ``tables`` under ``directory`` (a table's shards in
    parallel), then writes the manifest; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for table, endpoints in tables.items():
        handles = [e.send(rq.Save(str(shard_path(directory, table, e.shard)))) for e in endpoints]
        gather(endpoints, handles, None)
    manifest = {"tables": {t: {"num_shards": len(e)} for t, e in tables.items()}}
    tmp = directory / f".{MANIFEST}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, directory / MANIFEST)
    return directory
