"""Writing checkpoints: :func:`save_buffer`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import recollect
from recollect.checkpoint.atomic import atomic_write
from recollect.checkpoint.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    describe_spec,
    dump_manifest,
    leaf_file_name,
)
from recollect.checkpoint.npyio import write_array, write_columns
from recollect.checkpoint.state import encode_rng, encode_sampler
from recollect.errors import CheckpointError
from recollect.storage.ring import RingStorage

__all__ = ["CheckpointWriter", "save_buffer"]


class CheckpointWriter:
    """Collects the files of one checkpoint directory and their checksums."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, dict[str, Any]] = {}

    def _record(self, name: str, digest_size: tuple[str, int]) -> str:
        self.files[name] = {"checksum": digest_size[0], "size_bytes": digest_size[1]}
        return name

    def columns(self, name: str, array: np.ndarray, offset: int, count: int) -> str:
        """Writes the stored columns of a ring array ``[num_envs, max_length, ...]``."""
        return self._record(name, write_columns(self.root / name, array, offset, count))

    def array(self, name: str, array: np.ndarray) -> str:
        """Writes one array."""
        return self._record(name, write_array(self.root / name, np.asarray(array)))

    def manifest(self, kind: str, body: dict[str, Any]) -> None:
        """Writes ``manifest.json`` last (after every data file), fsynced."""
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "kind": kind,
            "recollect_version": recollect.__version__,
            "created_ns": time.time_ns(),
            **body,
            "files": self.files,
        }
        with open(self.root / MANIFEST, "wb") as f:
            f.write(dump_manifest(manifest))
            f.flush()
            os.fsync(f.fileno())


def stored_layout(buffer: Any) -> tuple[int, int]:
    """``(slot_offset, stored steps per row)`` of the columns a checkpoint writes."""
    index, length = buffer._index, buffer.max_length
    count = index.hi - index.lo
    offset = 0 if count == length else index.lo % length
    return offset, count


def write_replay_part(buffer: Any, writer: CheckpointWriter) -> dict[str, Any]:
    """Writes a :class:`~recollect.ReplayBuffer`'s files; returns its manifest fields.

    The caller holds ``buffer._lock``.
    """
    if not isinstance(buffer._storage, RingStorage):
        raise CheckpointError(
            f"checkpoints of {type(buffer._storage).__name__} storage (frame stacks) are not "
            "supported yet; use storage='memmap' to persist such a buffer."
        )
    index = buffer._index
    offset, count = stored_layout(buffer)
    flat = buffer._flat
    leaves = []
    for i, (path, array) in enumerate(zip(flat.paths, buffer._storage.arrays, strict=True)):
        name = writer.columns(leaf_file_name(i, path), array, offset, count)
        leaves.append({"path": path, "file": name})
    return {
        "spec": describe_spec(flat.spec),
        "buffer": {
            "capacity": buffer.capacity,
            "num_envs": buffer.num_envs,
            "max_length": buffer.max_length,
            "sequence_length": buffer._sequence_length,
            "t": index.t,
            "t_clear": index.t_clear,
            "stored_steps": count,
            "slot_offset": offset,
        },
        "leaves": leaves,
        "sampler": encode_sampler(buffer.sampler, writer.array),
        "rng": encode_rng(buffer.rng),
    }


def save_buffer(buffer: Any, path: str | os.PathLike) -> Path:
    """Writes ``buffer`` (a ReplayBuffer or TransitionBuffer) as a checkpoint directory at ``path``.

    Only the stored steps are written, one ``.npy`` per spec leaf, plus
    ``manifest.json`` (format version, spec, capacity, counters, sampler
    state, RNG state, checksum of every file). The directory is written as a
    sibling and renamed into place, so ``path`` always holds a complete
    checkpoint, old or new, even if the process is killed. Writers are
    blocked while the buffer is saved; samplers may keep reading.

    Returns:
        The absolute checkpoint path.

    Raises:
        CheckpointError: ``path`` is a file or a non-empty non-checkpoint
            directory, or the spec cannot be described.
        OSError: the disk is full or not writable (the old checkpoint stays).

    Example:
        >>> buf.save("ckpt/replay")
        >>> restored = recollect.ReplayBuffer.load("ckpt/replay")
    """
    from recollect.buffers.transition_buffer import TransitionBuffer

    if isinstance(buffer, TransitionBuffer):
        from recollect.checkpoint.transition import save_transition_buffer

        return save_transition_buffer(buffer, path)

    def write(root: Path) -> None:
        writer = CheckpointWriter(root)
        body = write_replay_part(buffer, writer)
        writer.manifest("ReplayBuffer", body)

    with buffer._lock:
        return atomic_write(path, write)
