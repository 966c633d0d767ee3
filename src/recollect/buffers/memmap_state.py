"""The state of a memmap buffer's directory: reopened on construction, flushed on demand.

The directory holds the live ``.npy`` leaf files (mapped by
:class:`~recollect.storage.memmap.MemmapStorage`) and a format-2 manifest
(:mod:`recollect.state.manifest`) with the buffer's configuration and the
table's state (clocks, episode ends, sampler state), written by
:meth:`MemmapState.flush` with the manifest replaced atomically. The first
write after a flush creates a ``dirty`` marker; reopening a dirty directory
raises :class:`~recollect.errors.CheckpointError` rather than restoring clocks
that no longer match the data.
"""

from __future__ import annotations

import json
import pathlib
import weakref
from typing import Any

from recollect.errors import CheckpointError
from recollect.state.files import read_state, write_in_place
from recollect.state.manifest import FORMAT_VERSION, MANIFEST

__all__ = ["MemmapState"]

DIRTY = "dirty"


class MemmapState:
    """Manifest and table state of one memmap directory.

    Args:
        directory: the buffer's directory (created if missing).
        config: the buffer's configuration; a reopen must match it exactly
            (spec, geometry, frame stacks, sequence length, sampler).

    Raises:
        CheckpointError: the directory's manifest is unreadable, of another
            ``format_version``, dirty, or describes another buffer.
    """

    def __init__(self, directory: Any, config: dict[str, Any]) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = json.loads(json.dumps(config))  # JSON-normal form, comparable
        self.manifest_path = self.directory / MANIFEST
        self.saved = self._read() if self.manifest_path.exists() else None
        self.clean = False

    @property
    def reopen(self) -> bool:
        """Whether the directory already holds this buffer."""
        return self.saved is not None

    def _read(self) -> Any:
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"cannot read {self.manifest_path}: {err}") from err
        version = manifest.get("format_version") if isinstance(manifest, dict) else None
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"{self.manifest_path} has format_version={version!r}; this recollect reads "
                f"format_version={FORMAT_VERSION} memmap directories."
            )
        stored = manifest.get("config") or {}
        for key, value in self.config.items():
            if stored.get(key) != value:
                raise CheckpointError(
                    f"memmap directory {self.directory} holds a buffer with {key}="
                    f"{stored.get(key)!r}, but this buffer has {key}={value!r}. Use the same "
                    "arguments to reopen it, or another directory."
                )
        if (self.directory / DIRTY).exists():
            raise CheckpointError(
                f"memmap directory {self.directory} was written after its last flush(); its "
                "counters no longer match the data. Call buf.flush() (or let the buffer be "
                "closed) before reopening; delete the directory to start over."
            )
        return read_state(self.directory, resolve=False)

    def attach(self, storage: Any, table: Any, lock: Any, owner: Any) -> None:
        """Restores the table state of a reopened directory, flushes, and flushes again when
        ``owner`` (the buffer) is garbage collected."""
        if self.saved is not None:
            state = dict(self.saved.state["table"])
            state.pop("rng", None)  # the constructor's rng argument decides the future draws
            try:
                table.load_state_dict(state)
            except (KeyError, ValueError) as err:
                raise CheckpointError(f"{self.saved.where}: bad table state ({err}).") from err
        self.flush(storage, table, lock)
        weakref.finalize(owner, self.flush, storage, table, lock)

    def before_write(self) -> None:
        """Marks the directory dirty (once per flush); the caller holds the lock."""
        if self.clean:
            (self.directory / DIRTY).touch()
            self.clean = False

    def flush(self, storage: Any, table: Any, lock: Any) -> None:
        """Flushes the mapped data, then writes the manifest and table state atomically."""
        if not self.directory.is_dir():  # removed under us (e.g. a temporary directory)
            return
        with lock:
            storage.flush()
            state = {"storage": storage.state_dict(), "table": table.state_dict()}
            write_in_place(self.directory, "ReplayBuffer", self.config, state)
            (self.directory / DIRTY).unlink(missing_ok=True)
            self.clean = True
