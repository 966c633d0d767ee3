"""``save`` / ``load`` shared by the buffers; the format lives in :mod:`recollect.checkpoint`."""

from __future__ import annotations

import os
from typing import ClassVar, Self


class Checkpointable:
    """Adds ``save(path)`` and ``load(path, mmap=False)`` to a buffer class.

    ``_checkpoint_kind`` names the class in the manifest, so loading a
    checkpoint of another kind raises :class:`~recollect.errors.CheckpointError`.
    """

    _checkpoint_kind: ClassVar[str]

    def save(self, path: str | os.PathLike) -> None:
        """Writes a checkpoint directory, atomically (see :mod:`recollect.checkpoint`).

        Raises:
            CheckpointError: ``path`` is a non-empty directory that is not a
                checkpoint, or the buffer's storage cannot be checkpointed.
        """
        from recollect.checkpoint import save_buffer

        save_buffer(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = False) -> Self:
        """Restores a buffer written by :meth:`save`.

        Args:
            path: the checkpoint directory.
            mmap: map full leaf files copy-on-write instead of reading them
                (the checkpoint files are never modified).

        Raises:
            CheckpointError: missing or damaged files, a newer format version,
                or a checkpoint of another buffer kind.
        """
        from recollect.checkpoint import load_buffer

        return load_buffer(path, mmap=mmap, kind=cls._checkpoint_kind)
