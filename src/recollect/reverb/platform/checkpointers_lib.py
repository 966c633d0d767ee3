"""Checkpointers (``reverb.platform.checkpointers_lib``).

A checkpointer owns a directory; each ``Client.checkpoint()`` writes a new
checkpoint into a sub-directory named by its UTC time (recollect's own format,
written atomically), and a server given a checkpointer restores the newest one
at start, as Reverb does. A directory that holds one of dm-reverb's own
checkpoints (``DONE`` + ``tables.tfrecord``) is read by
``recollect.state.reverb`` when that reader is installed.
"""

from __future__ import annotations

import datetime
import importlib
import os
import tempfile
from pathlib import Path
from typing import Any

from recollect.errors import CheckpointError
from recollect.state.manifest import MANIFEST

_REVERB_MARKERS = ("tables.tfrecord", "DONE")


class CheckpointerBase:
    """Writes and restores a server's checkpoints under :attr:`path`."""

    def __init__(self, path: str | os.PathLike, group: str = "") -> None:
        self.path = Path(path)
        self.group = group

    def save(self, core: Any) -> Path:
        """Writes a new checkpoint of ``core``; returns its directory."""
        from recollect.reverb import checkpoint_format as _checkpoint

        self.path.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H-%M-%S.%f")
        return Path(_checkpoint.save(core, self.path / stamp)).resolve()

    def latest(self) -> Path | None:
        """The newest checkpoint directory (ours or dm-reverb's), or None."""
        if not self.path.is_dir():
            return None
        found = [
            d
            for d in self.path.iterdir()
            if d.is_dir() and ((d / MANIFEST).is_file() or _is_reverb_checkpoint(d))
        ]
        return max(found, key=lambda d: d.name) if found else None

    def restore(self, core: Any) -> Path | None:
        """Loads the newest checkpoint into ``core``; returns it (None: nothing to load).

        Raises:
            CheckpointError: a damaged checkpoint, or dm-reverb's without its reader.
        """
        latest = self.latest()
        if latest is None:
            return None
        if _is_reverb_checkpoint(latest) and not (latest / MANIFEST).is_file():
            load_reverb_checkpoint(core, latest)
            return latest
        from recollect.reverb import checkpoint_format as _checkpoint

        _checkpoint.load(core, latest)
        return latest

    def internal_checkpointer(self) -> CheckpointerBase:
        return self


def _is_reverb_checkpoint(directory: Path) -> bool:
    return all((directory / name).exists() for name in _REVERB_MARKERS)


def load_reverb_checkpoint(core: Any, directory: Path) -> None:
    """Loads a dm-reverb checkpoint directory into ``core`` (the hook for its reader).

    Raises:
        CheckpointError: the reader (``recollect.state.reverb``) is not available.
    """
    try:
        importlib.import_module("recollect.state.reverb")
    except ImportError as err:
        raise CheckpointError(
            f"{directory} holds a dm-reverb checkpoint, and this recollect cannot read those "
            "(recollect.state.reverb is missing); restore it with dm-reverb, or upgrade."
        ) from err
    from recollect.reverb.dm_checkpoint import load_into_server as load

    load(core, directory)


class DefaultCheckpointer(CheckpointerBase):
    """Checkpoints under ``path`` (``group`` is accepted for compatibility)."""


class TempDirCheckpointer(DefaultCheckpointer):
    """Checkpoints under a new temporary directory."""

    def __init__(self) -> None:
        super().__init__(tempfile.mkdtemp(prefix="reverb-checkpoints-"))


def default_checkpointer() -> CheckpointerBase:
    """A :class:`TempDirCheckpointer` (Reverb's default)."""
    return TempDirCheckpointer()


__all__ = [
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
]
