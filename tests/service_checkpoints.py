"""A small service checkpoint for the restore tests (embedded shards and Ray shards)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import recollect as rc
from recollect.service import Server

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}
#: the marker file of a save in progress (recollect.state.atomic)
MARKER = ".recollect-save"


def steps(value: float, num_envs: int) -> dict:
    """One step of every env, every ``obs`` value ``value``."""
    return {"obs": np.full((num_envs, 3), value, np.float32), "is_last": np.zeros(num_envs, bool)}


def service_checkpoint(directory: Path, num_steps: int) -> None:
    """A checkpoint of table "t" (1 shard, 2 rows) in ``directory`` holding ``num_steps`` steps."""
    with Server({"t": rc.ReplayBuffer(SPEC, 64, 2)}, checkpoint_dir=directory) as server:
        client = server.client()
        with client.writer("t", 2) as writer:
            for k in range(num_steps // 2):
                writer.add_batch(steps(k, 2))
        client.checkpoint()
