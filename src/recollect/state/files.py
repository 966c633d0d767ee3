"""Writing and reading state trees as directories of ``.npy`` files plus one manifest.

:func:`write_checkpoint` puts a whole directory atomically in place;
:func:`write_in_place` rewrites only the manifest and state files of a
directory that also holds live files (a memmap buffer), with the manifest
replaced atomically last. :func:`read_state` reads either, format 1 included.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from recollect.errors import CheckpointError
from recollect.state.atomic import atomic_write, resolve_checkpoint
from recollect.state.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    dump_manifest,
    from_json,
    parse_manifest,
    to_json,
)
from recollect.state.npyio import (
    map_npy,
    mmap_columns,
    read_array,
    read_columns_into,
    write_array,
    write_columns,
)
from recollect.state.rng import state_file_path
from recollect.state.safe_files import create_new, read_regular
from recollect.state.space import disk_full_error
from recollect.version import __version__

__all__ = ["Saved", "load_consistent", "read_state", "write_checkpoint", "write_in_place"]

_FILE, _COLUMNS, _MEMMAP = "__file__", "__columns__", "__memmap__"
_T = TypeVar("_T")
LOAD_ATTEMPTS = 50


@dataclasses.dataclass
class Saved:
    """A state directory read back.

    Attributes:
        kind: the object kind (``"ReplayBuffer"``, ``"TransitionBuffer"``).
        config: JSON-able construction arguments.
        state: the state tree; arrays as ``np.ndarray``, ring columns as
            :class:`ColumnFile` (a :class:`~recollect.storage.base.ColumnSource`).
        manifest: the whole manifest; ``where`` its path, for messages.
    """

    kind: str
    config: dict[str, Any]
    state: dict[str, Any]
    manifest: dict[str, Any]
    where: str


class _Writer:
    """Writes the arrays of a state tree and collects their checksums."""

    def __init__(self, root: Path, layout: Mapping[str, int] | None, live: bool) -> None:
        self.root, self.layout, self.live = root, layout, live
        self.files: dict[str, dict[str, Any]] = {}
        self.tag = secrets.token_hex(3) if live else ""

    def _name(self, prefix: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.-]", "_", prefix)[:80]
        name, k = f"{base}{self.tag}.npy", 1
        while name in self.files:
            name, k = f"{base}-{k}{self.tag}.npy", k + 1
        return name

    def encode(self, value: Any, prefix: str, columns: bool = False) -> Any:
        if isinstance(value, np.memmap) and self.live and value.filename is not None:
            return {_MEMMAP: os.path.relpath(value.filename, self.root)}
        if isinstance(value, np.ndarray) and value.ndim > 0:
            name = self._name(prefix)
            if columns and self.layout is not None:
                digest = write_columns(
                    self.root / name, value, self.layout["slot_offset"], self.layout["stored_steps"]
                )
                ref = {_COLUMNS: name}
            else:
                digest = write_array(self.root / name, value)
                ref = {_FILE: name}
            self.files[name] = {"checksum": digest[0], "size_bytes": digest[1]}
            return ref
        if isinstance(value, Mapping):
            return {
                str(k): self.encode(v, f"{prefix}-{k}", columns or k == "columns")
                for k, v in value.items()
            }
        return to_json(value)

    def manifest(self, kind: str, body: dict[str, Any]) -> bytes:
        return dump_manifest(
            {
                "format": FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                "kind": kind,
                "recollect_version": __version__,
                "created_ns": time.time_ns(),
                **body,
                "files": self.files,
            }
        )


def _write_manifest(path: Path, data: bytes) -> None:
    try:
        with create_new(path) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        path.unlink(missing_ok=True)
        full = disk_full_error(err, path, len(data))
        if full is None:
            raise
        raise full from err


def write_checkpoint(
    path: str | os.PathLike,
    kind: str,
    config: dict[str, Any],
    state: dict[str, Any],
    layout: dict[str, int] | None = None,
) -> Path:
    """Writes ``state`` as a checkpoint directory at ``path``, atomically.

    Args:
        path: the directory (replaced atomically when it holds a checkpoint).
        kind: the object kind recorded in the manifest.
        config: JSON-able construction arguments.
        state: a ``state_dict()`` tree; entries under a ``columns`` key are
            ring arrays ``[num_envs, max_length, ...]`` of which ``layout``
            (``slot_offset``, ``stored_steps``) columns are written.

    Returns:
        The absolute checkpoint path.

    Raises:
        CheckpointError: ``path`` is a file or a foreign non-empty directory,
            or the state holds an object array.
        OSError: the disk is full or not writable (the old checkpoint stays).
    """

    def write(root: Path) -> None:
        writer = _Writer(root, layout, live=False)
        tree = writer.encode(state, "state")
        data = writer.manifest(kind, {"config": config, "layout": layout, "state": tree})
        _write_manifest(root / MANIFEST, data)

    return atomic_write(path, write)


def write_in_place(
    directory: Path, kind: str, config: dict[str, Any], state: dict[str, Any]
) -> None:
    """Writes ``state`` into ``directory`` beside live memory-mapped files.

    ``np.memmap`` arrays in ``state`` are recorded by file name; other arrays
    go to new files. The manifest is replaced atomically last, then state files
    it no longer lists are removed, so a crash leaves the old or the new state.
    """
    writer = _Writer(directory, None, live=True)
    tree = writer.encode(state, "state")
    body = {"config": config, "layout": None, "state": tree, "storage": "memmap"}
    data = writer.manifest(kind, body)
    tmp = directory / f"{MANIFEST}.tmp-{secrets.token_hex(4)}"
    _write_manifest(tmp, data)
    os.replace(tmp, directory / MANIFEST)
    for old in directory.glob("state-*.npy"):
        if old.name not in writer.files:
            old.unlink(missing_ok=True)


@dataclasses.dataclass
class ColumnFile:
    """Saved ring columns; implements :class:`~recollect.storage.base.ColumnSource`."""

    path: Path
    checksum: str
    size: int
    offset: int
    count: int

    def read_into(self, dest: np.ndarray) -> None:
        read_columns_into(self.path, dest, self.offset, self.count, self.checksum, self.size)

    def map(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        if self.offset != 0 or self.count != shape[1]:
            return None
        return mmap_columns(self.path, shape, dtype, self.checksum, self.size)


class _Reader:
    def __init__(
        self, root: Path, manifest: dict[str, Any], where: str, copy_on_write: bool = False
    ) -> None:
        self.root, self.manifest, self.where = root, manifest, where
        self.map_mode: Literal["r+", "c"] = "c" if copy_on_write else "r+"
        files = manifest.get("files")
        self.files = files if isinstance(files, dict) else {}

    def entry(self, name: Any) -> tuple[Path, str, int]:
        info = self.files.get(name) if isinstance(name, str) else None
        if not isinstance(info, dict) or {"checksum", "size_bytes"} - set(info):
            raise CheckpointError(
                f"{self.where}: file {name!r} is not listed with a checksum; the manifest was "
                "edited or damaged. Restore it from a backup."
            )
        return state_file_path(self.root, name), info["checksum"], info["size_bytes"]

    def array(self, name: str) -> np.ndarray:
        return read_array(*self.entry(name))

    def columns(self, name: str, layout: Any) -> ColumnFile:
        if not isinstance(layout, dict):
            raise CheckpointError(
                f"{self.where}: ring columns without a layout; the manifest was edited or "
                "damaged. Restore it from a backup."
            )
        return ColumnFile(
            *self.entry(name), int(layout["slot_offset"]), int(layout["stored_steps"])
        )

    def memmap(self, name: Any) -> np.ndarray:
        path = state_file_path(self.root, name)
        try:
            return map_npy(path, self.map_mode)  # a regular file (no link), not torn
        except CheckpointError as err:
            raise CheckpointError(f"{self.where}: cannot map {path}: {err}") from err
        except (OSError, ValueError, EOFError) as err:
            raise CheckpointError(f"{self.where}: cannot map {path}: {err}") from err

    def decode(self, value: Any, layout: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {_FILE}:
                return self.array(value[_FILE])
            if set(value) == {_COLUMNS}:
                return self.columns(value[_COLUMNS], layout)
            if set(value) == {_MEMMAP}:
                return self.memmap(value[_MEMMAP])
            if "__ndarray__" in value:
                return from_json(value)
            return {k: self.decode(v, layout) for k, v in value.items()}
        return from_json(value)


def read_state(
    path: str | os.PathLike, *, resolve: bool = True, copy_on_write: bool = False
) -> Saved:
    """Reads a state directory written by :func:`write_checkpoint` or :func:`write_in_place`.

    Args:
        path: the directory.
        resolve: resolve an interrupted atomic save (checkpoints; not memmap directories).
        copy_on_write: map a memmap directory's live files copy-on-write (opened
            read-only; writes stay in this process) instead of read-write.

    Raises:
        CheckpointError: missing or damaged manifest or files, a newer format.
    """
    root = resolve_checkpoint(path) if resolve else Path(path)
    manifest = parse_manifest(root)
    where = str(root / MANIFEST)
    reader = _Reader(root, manifest, where, copy_on_write)
    if manifest["format_version"] == 1:
        from recollect.state.v1 import upgrade

        return Saved(*upgrade(manifest, reader), manifest, where)
    config, state = manifest.get("config"), manifest.get("state")
    if not isinstance(config, dict) or not isinstance(state, dict):
        raise CheckpointError(f"{where}: fields config and state must be objects.")
    tree = reader.decode(state, manifest.get("layout"))
    return Saved(manifest["kind"], config, tree, manifest, where)


def _identity(path: str | os.PathLike) -> tuple[str, str] | None:
    """Which checkpoint ``path`` resolves to now: the directory and the sha256 of its
    manifest, or None.

    Both matter. A save renames its complete sibling into place, so the same
    manifest (same inode, mtime and bytes) is first read at ``<name>.tmp-...``
    (while ``path`` is missing between the save's renames) and then at
    ``path``; and each save's manifest differs (its ``created_ns``), where a
    stat would not tell a new manifest that got the inode of the one just
    deleted, within the clock's granularity.
    """
    try:
        root = resolve_checkpoint(path)
        return str(root), hashlib.sha256(read_regular(root / MANIFEST)).hexdigest()
    except (OSError, CheckpointError):
        return None


def load_consistent(path: str | os.PathLike, build: Callable[[Saved], _T]) -> _T:
    """``build(read_state(path))``, read again when a concurrent save replaced ``path`` meanwhile.

    A save renames a new directory into place and deletes the old one, so a
    reader (another process or a thread of the saver's) may find the files of
    the checkpoint it started with renamed or gone, or ``path`` missing between
    the save's two renames. A failure is reported only when ``path`` resolves
    to the same manifest before and after the attempt (the checkpoint itself is
    damaged, or there is none), or after ``LOAD_ATTEMPTS`` replacements in a row.

    Raises:
        CheckpointError: as :func:`read_state`, or ``build``'s error.
    """
    attempt = 0
    while True:
        before = _identity(path)
        try:
            return build(read_state(path))
        except (CheckpointError, OSError):
            attempt += 1
            if attempt >= LOAD_ATTEMPTS or _identity(path) == before:
                raise
        time.sleep(min(0.001 * attempt, 0.01))
