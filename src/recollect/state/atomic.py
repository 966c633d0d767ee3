"""Atomic replacement of a checkpoint directory.

A save never touches the live checkpoint until the new one is complete::

    1. write everything into the sibling  <name>.tmp-<pid>-<token>/  (manifest last), fsync
    2. rename  <name>  ->  <name>.old-<token'>      (only if a checkpoint is there)
    3. rename  <name>.tmp-...  ->  <name>,  fsync the parent directory
    4. delete  <name>.old-<token'>   (its manifest first, its marker last)

Every directory a save writes holds a marker file ``.recollect-save`` with its
own random token, and its temporary and old names end with that token. Only
siblings whose name and marker agree count as this module's own: a user's
``replay.old-backup`` or ``mv replay replay.old-keep`` is never adopted,
renamed or deleted. A symlinked checkpoint path is resolved first, so the
link keeps pointing at the (new) checkpoint.

A SIGKILL between any two system calls leaves either ``<name>`` complete (old
or new), or, only between steps 2 and 3, ``<name>`` missing with both the old
and the new complete siblings present. :func:`resolve_checkpoint` then reads
the newest complete sibling (by the manifest's ``created_ns``); the next save
first renames it into place and deletes the leftovers: marked siblings, and
siblings of those names that hold nothing but a marker (a kill while deleting
one in step 4 leaves one). A directory counts as
complete only when its manifest parses and its own checksum matches, and the
manifest is written after every data file was written and fsynced.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from recollect.errors import CheckpointError
from recollect.state.manifest import FORMAT_NAME, MANIFEST, parse_manifest
from recollect.state.safe_files import create_new, read_regular

__all__ = ["atomic_write", "find_checkpoint", "resolve_checkpoint"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MARKER = ".recollect-save"
_TOKEN = re.compile(r"[0-9a-f]{16}")


def _token(directory: Path) -> str | None:
    """The save token in ``directory``'s marker file, or None (no marker: not ours)."""
    try:
        token = read_regular(directory / MARKER).decode().strip()
    except (OSError, UnicodeDecodeError, CheckpointError):
        return None
    return token if _TOKEN.fullmatch(token) else None


def _mark(directory: Path, token: str) -> None:
    with create_new(directory / MARKER, "w") as f:
        f.write(token)
        f.flush()
        os.fsync(f.fileno())


def _siblings(path: Path) -> list[Path]:
    """Sibling directories an earlier save of ``path`` created: name and marker agree."""
    if not path.parent.is_dir():
        return []
    tmp = re.compile(re.escape(f"{path.name}.tmp-") + r"\d+-([0-9a-f]{16})")
    old = re.compile(re.escape(f"{path.name}.old-") + r"([0-9a-f]{16})")
    found = []
    for p in path.parent.iterdir():
        match = tmp.fullmatch(p.name) or old.fullmatch(p.name)
        if match and not p.is_symlink() and p.is_dir() and _token(p) == match.group(1):
            found.append(p)
    return sorted(found)


def _leftovers(path: Path) -> list[Path]:
    """What earlier saves of ``path`` left to delete: their marked siblings, and siblings
    of their names that hold nothing but (at most) a marker, which a save killed while
    deleting one (or while creating one, before its marker) leaves."""
    found = _siblings(path)
    if not path.parent.is_dir():
        return found
    names = re.compile(re.escape(path.name) + r"\.(tmp-\d+-|old-)[0-9a-f]{16}")
    for p in path.parent.iterdir():
        if p in found or not names.fullmatch(p.name) or p.is_symlink() or not p.is_dir():
            continue
        with contextlib.suppress(OSError):
            if {e.name for e in os.scandir(p)} <= {MARKER}:
                found.append(p)
    return found


def _remove(directory: Path) -> None:
    """Deletes a directory a save wrote: its manifest first (so a part-deleted directory is
    never taken for a complete one), its marker last (so a kill part-way leaves it marked,
    or empty, for the next save's cleanup)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / MANIFEST)
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            if entry.name == MARKER:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / MARKER)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(directory)


def _complete_sibling(path: Path) -> Path | None:
    """Newest sibling directory whose manifest parses and checks out, if any."""
    best, best_ns = None, -1
    for candidate in _siblings(path):
        try:
            created = int(parse_manifest(candidate).get("created_ns", 0))
        except (CheckpointError, TypeError, ValueError, OSError):
            continue
        if created > best_ns:
            best, best_ns = candidate, created
    return best


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The directory to load for ``path``: ``path`` itself, or the sibling an interrupted save left.

    Never renames anything (a concurrent saver may be between its renames).

    Raises:
        CheckpointError: nothing loadable at ``path``.
    """
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.exists() or not path.parent.exists():
        return path
    recovered = _complete_sibling(path)
    if recovered is None or path.exists():  # a save put its new directory in place meanwhile
        return path
    return recovered


def find_checkpoint(path: str | os.PathLike) -> Path | None:
    """The checkpoint to restore for ``path``, or None when there is none to restore.

    The one resolution every restore goes through (``ReplayBuffer.load``, a
    service shard opening or restarting, the manager): ``path`` itself when it
    exists, else the complete sibling an interrupted save left
    (:func:`resolve_checkpoint`); None when neither exists or ``path`` is an
    empty directory. A damaged checkpoint is returned, so loading it raises
    ``CheckpointError``.
    """
    root = resolve_checkpoint(path)
    if not root.exists() or (root.is_dir() and not any(root.iterdir())):
        return None
    return root


def _is_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a checkpoint a save may replace: a save of this module wrote it
    (its marker), or its manifest is a JSON object of the recollect format (any size)."""
    if _token(path) is not None:
        return True
    try:
        manifest = json.loads(read_regular(path / MANIFEST))
    except (OSError, ValueError, CheckpointError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME


def _prepare(path: Path) -> None:
    """Finishes an interrupted save, deletes leftovers, refuses to replace a foreign dir."""
    if not path.exists():
        recovered = _complete_sibling(path)
        if recovered is not None:
            os.rename(recovered, path)
            _fsync_dir(path.parent)
    for leftover in _leftovers(path):
        with contextlib.suppress(OSError):
            _remove(leftover)
    if path.exists():
        if not path.is_dir():
            raise CheckpointError(f"{path}: exists and is not a directory; choose another path.")
        if any(path.iterdir()) and not _is_checkpoint(path):
            raise CheckpointError(
                f"{path}: a non-empty directory that is not a recollect checkpoint; refusing "
                "to replace it. Choose an empty or new path."
            )


def _resolve_link(path: Path) -> Path:
    """The directory a symlinked checkpoint path points to (created by the save if dangling)."""
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_dir():
        raise CheckpointError(
            f"{path}: a symlink to {target}, which is not a directory; point it at a "
            "checkpoint directory or save to another path."
        )
    return target


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Runs ``write(tmp_dir)`` and atomically puts ``tmp_dir`` in place at ``path``.

    ``write`` must create every file, fsync it, and write the manifest last.
    One writer per path at a time.

    Returns:
        The checkpoint path.

    Raises:
        CheckpointError: ``path`` is a file or a foreign non-empty directory.
    """
    path = _resolve_link(Path(path).absolute())
    path.parent.mkdir(parents=True, exist_ok=True)
    _prepare(path)
    token = secrets.token_hex(8)
    tmp = path.parent / f"{path.name}.tmp-{os.getpid()}-{token}"
    tmp.mkdir()
    try:
        _mark(tmp, token)
        write(tmp)
        _fsync_dir(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            _remove(tmp)
        raise
    old = None
    if path.exists():
        old_token = _token(path)
        if old_token is None:  # a checkpoint of an earlier recollect: mark it before the rename
            old_token = secrets.token_hex(8)
            _mark(path, old_token)
        old = path.parent / f"{path.name}.old-{old_token}"
        os.rename(path, old)
    os.rename(tmp, path)
    _fsync_dir(path.parent)
    if old is not None:
        with contextlib.suppress(OSError):
            _remove(old)
    return path
