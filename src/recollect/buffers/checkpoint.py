"""Checkpoints: versioned, pickle-free, atomic directories that restore a buffer exactly.

``save_buffer(buffer, path)`` writes the buffer's ``config()`` and
``state_dict()`` (stored steps, clocks, sampler state, RNG state) through the
one state format (:mod:`recollect.state.manifest`); ``load_buffer(path)``
restores whichever buffer kind the directory holds, optionally memory-mapped.
Format-1 checkpoints (the golden files in ``tests/golden/v1``) still load.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from recollect.buffers import ReplayBuffer, TransitionBuffer
from recollect.buffers.replay_buffer import buffer_from_saved
from recollect.errors import CheckpointError
from recollect.state.files import load_consistent
from recollect.state.manifest import FORMAT_VERSION

__all__ = ["FORMAT_VERSION", "load_buffer", "save_buffer"]

#: ``{checkpoint kind: restore(saved, mmap=...)}``
KINDS: dict[str, Any] = {
    "ReplayBuffer": buffer_from_saved,
    "TransitionBuffer": TransitionBuffer.from_saved,
}


def save_buffer(buffer: Any, path: str | os.PathLike) -> Path:
    """Writes ``buffer`` (a ReplayBuffer or TransitionBuffer) as a checkpoint directory at ``path``.

    The directory is written as a sibling and renamed into place, so ``path``
    always holds a complete checkpoint, old or new, even if the process is
    killed. Writers are blocked while the buffer is saved.

    Returns:
        The absolute checkpoint path.

    Raises:
        CheckpointError: ``path`` is a file or a non-empty non-checkpoint
            directory, or the buffer is of an unknown kind.
        OSError: the disk is full or not writable (the old checkpoint stays).

    Example:
        >>> save_buffer(buf, "ckpt/replay")
        >>> restored = load_buffer("ckpt/replay")
    """
    if not isinstance(buffer, ReplayBuffer | TransitionBuffer):
        raise CheckpointError(
            f"save_buffer takes a ReplayBuffer or TransitionBuffer; got {type(buffer).__name__}."
        )
    return Path(buffer.save(path))


def load_buffer(path: str | os.PathLike, mmap: bool = False, *, kind: str | None = None) -> Any:
    """Restores a buffer written by :func:`save_buffer` (same steps, ids, clocks, sampler
    state and RNG state, so it samples the same future sequence).

    Args:
        path: the checkpoint directory.
        mmap: map full buffers' leaf files copy-on-write instead of reading them.
        kind: ``"ReplayBuffer"`` or ``"TransitionBuffer"`` to require one.

    Raises:
        CheckpointError: the path is missing or not a checkpoint; a file is
            missing, truncated or fails its checksum; the manifest was edited;
            the format version is newer than this recollect; another kind.
    """
    return load_consistent(path, lambda saved: _build(saved, mmap, kind))


def _build(saved: Any, mmap: bool, kind: str | None) -> Any:
    if kind is not None and saved.kind != kind:
        raise CheckpointError(
            f"{saved.where}: holds a {saved.kind}, not a {kind}; load it "
            f"with recollect.{saved.kind}.load."
        )
    restore = KINDS.get(saved.kind)
    if restore is None:
        raise CheckpointError(f"{saved.where}: unknown checkpoint kind {saved.kind!r}.")
    return restore(saved, mmap=mmap)
