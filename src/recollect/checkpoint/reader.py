"""Reading checkpoints: :func:`load_buffer`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from recollect.checkpoint.atomic import resolve_checkpoint
from recollect.checkpoint.format import MANIFEST, parse_manifest, rebuild_spec
from recollect.checkpoint.npyio import mmap_columns, read_array, read_columns_into
from recollect.checkpoint.state import decode_rng, decode_sampler, state_file_path
from recollect.errors import CheckpointError, RecollectError

__all__ = ["CheckpointReader", "load_buffer"]


class CheckpointReader:
    """Reads the files a manifest lists, each checked against its size and checksum."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self.where = str(root / MANIFEST)

    def entry(self, name: str) -> dict[str, Any]:
        """The manifest's ``files`` entry of ``name``."""
        info = self.manifest["files"].get(name)
        if not isinstance(info, dict) or {"checksum", "size_bytes"} - set(info):
            raise CheckpointError(f"{self.where}: file {name!r} is not listed with a checksum.")
        return info

    def array(self, name: str) -> np.ndarray:
        """Loads a small array file (``allow_pickle=False``)."""
        info = self.entry(name)
        return read_array(state_file_path(self.root, name), info["checksum"], info["size_bytes"])

    def columns_into(self, name: str, dest: np.ndarray, offset: int, count: int) -> None:
        """Reads a column file into a ring array ``[num_envs, max_length, ...]``."""
        info = self.entry(name)
        path = state_file_path(self.root, name)
        read_columns_into(path, dest, offset, count, info["checksum"], info["size_bytes"])

    def mapped(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Maps a full column file copy-on-write after verifying it."""
        info = self.entry(name)
        path = state_file_path(self.root, name)
        return mmap_columns(path, shape, dtype, info["checksum"], info["size_bytes"])


def _int(section: Any, key: str, where: str, minimum: int = 0, name: str = "buffer") -> int:
    value = section.get(key) if isinstance(section, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CheckpointError(
            f"{where}: field {name}.{key} must be an int >= {minimum}; got {value!r}."
        )
    return value


def read_replay_part(reader: CheckpointReader, mmap: bool) -> Any:
    """Rebuilds the ReplayBuffer described by the manifest (data, counters, sampler, RNG)."""
    from recollect.buffers.replay_buffer import ReplayBuffer

    manifest, where = reader.manifest, reader.where
    b = manifest["buffer"]
    if not isinstance(b, dict):
        raise CheckpointError(f"{where}: field buffer must be an object.")
    t, t_clear = _int(b, "t", where), _int(b, "t_clear", where)
    count, offset = _int(b, "stored_steps", where), _int(b, "slot_offset", where)
    sampler, state = decode_sampler(manifest.get("sampler"), reader.array, where)
    try:
        buffer = ReplayBuffer(
            rebuild_spec(manifest.get("spec"), where),
            _int(b, "capacity", where, 1),
            _int(b, "num_envs", where, 1),
            rng=decode_rng(manifest.get("rng"), where),
            sampler=sampler,
            sequence_length=b.get("sequence_length"),
            force=mmap,  # mapped leaves take no RAM up front
        )
    except (CheckpointError, MemoryError):
        raise
    except RecollectError as err:
        raise CheckpointError(f"{where}: inconsistent buffer description ({err}).") from err
    index = buffer._index
    index.t, index.t_clear = t, t_clear
    if t_clear > t or index.hi - index.lo != count:
        raise CheckpointError(
            f"{where}: counters t={t}, t_clear={t_clear} do not match stored_steps={count}."
        )
    _read_leaves(reader, buffer, offset, count, mmap)
    if buffer._is_last is not None:
        slots = np.arange(index.lo, index.hi) % buffer.max_length
        index.rebuild(buffer._storage.arrays[buffer._is_last][:, slots])
    try:
        sampler.load_state_dict(state)
    except Exception as err:
        raise CheckpointError(f"{where}: cannot restore the sampler state ({err}).") from err
    return buffer


def _read_leaves(
    reader: CheckpointReader, buffer: Any, offset: int, count: int, mmap: bool
) -> None:
    leaves = reader.manifest.get("leaves")
    flat, storage = buffer._flat, buffer._storage
    paths = [leaf.get("path") for leaf in leaves] if isinstance(leaves, list) else None
    if paths != flat.paths:
        raise CheckpointError(
            f"{reader.where}: leaves {paths} do not match the spec's leaves {flat.paths}."
        )
    direct = mmap and count == buffer.max_length and offset == 0
    for i, leaf in enumerate(leaves):
        dest = storage.arrays[i]
        if direct:
            storage.arrays[i] = reader.mapped(leaf["file"], dest.shape, dest.dtype)
        else:
            reader.columns_into(leaf["file"], dest, offset, count)
    if direct:
        storage.refresh_views()


def load_buffer(path: str | os.PathLike, mmap: bool = False, *, kind: str | None = None) -> Any:
    """Restores a buffer written by :func:`save_buffer`.

    The restored buffer is identical: same stored steps, ids, counters,
    sampler state (priorities) and RNG state, so it samples the same future
    sequence the original would have.

    Args:
        path: the checkpoint directory.
        mmap: map full buffers' leaf files copy-on-write instead of reading
            them: a large buffer restores at once and only the pages touched
            take memory (the checkpoint files are never modified). Buffers
            that are not full are always read.
        kind: ``"ReplayBuffer"`` or ``"TransitionBuffer"`` to require one.

    Returns:
        A :class:`~recollect.ReplayBuffer` or :class:`~recollect.TransitionBuffer`.

    Raises:
        CheckpointError: the path is missing or not a checkpoint; a file is
            missing, truncated or fails its checksum; the manifest was edited;
            the format version is newer than this recollect. The message
            names the file.
    """
    root = resolve_checkpoint(path)
    manifest = parse_manifest(root)
    reader = CheckpointReader(root, manifest)
    stored_kind = manifest["kind"]
    if kind is not None and stored_kind != kind:
        raise CheckpointError(
            f"{reader.where}: holds a {stored_kind}, not a {kind}; load it "
            f"with recollect.{stored_kind}.load."
        )
    if stored_kind == "TransitionBuffer":
        from recollect.checkpoint.transition import read_transition_buffer

        return read_transition_buffer(reader, mmap)
    if stored_kind != "ReplayBuffer":
        raise CheckpointError(f"{reader.where}: unknown checkpoint kind {stored_kind!r}.")
    return read_replay_part(reader, mmap)
