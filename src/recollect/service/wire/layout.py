"""Where a service checkpoint keeps each shard: the layout both sides agree on.

``directory/<table>/shard-<k>/`` (a ``ReplayBuffer`` checkpoint each, :func:`shard_path`)
and ``directory/service.json`` (:data:`MANIFEST`). The client side writes it
(:func:`recollect.service.client.checkpoints.save_shards`); the shard side opens a
shard from it (:func:`recollect.service.shard.open_shard`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MANIFEST", "shard_path"]

#: name of the service manifest in a checkpoint directory
MANIFEST = "service.json"


def shard_path(directory: str | os.PathLike, table: str, shard: int) -> Path:
    """Checkpoint directory of shard ``shard`` of ``table`` under a service checkpoint."""
    return Path(directory) / table / f"shard-{shard}"
