"""Files opened without following links: what a checkpoint or memmap directory holds is
read and written only as the regular file it names.

A directory can be shared, or prepared by someone else: a planted
``leaf-000-x.npy -> /some/file`` must never make a buffer truncate ``/some/file``
and use it as storage, and a listed file that is a FIFO or a link to a file outside
the checkpoint must never be read (a FIFO blocks ``open`` forever).

- :func:`create_new` removes whatever entry is at the path (the link itself, never
  its target), then creates the file with ``O_CREAT | O_EXCL | O_NOFOLLOW``: an
  entry planted between the two steps makes it fail, never followed.
- :func:`open_regular` opens with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO opens at once
  instead of blocking) and requires ``S_ISREG`` of the opened file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, Any

from recollect.errors import CheckpointError

__all__ = ["create_new", "open_regular", "read_regular"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def create_new(path: Path, mode: str = "wb") -> IO[Any]:
    """A new empty regular file at ``path``, open for writing (``"wb"``, ``"w+b"`` or ``"w"``).

    An existing entry at ``path`` (a file or a link) is removed first; a link's
    target is never touched.

    Raises:
        FileExistsError: something was put at ``path`` between the removal and the
            creation (nothing is followed or written).
        OSError: as ``os.open``.
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    flags = os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    flags |= os.O_RDWR if "+" in mode else os.O_WRONLY
    fd = os.open(path, flags, 0o644)
    try:
        return _named(os.fdopen(fd, mode), path)
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: Path, mode: str = "rb") -> IO[Any]:
    """``path`` opened for reading (``"rb"``) or reading and writing (``"r+b"``), when it
    is a regular file and not a link.

    Raises:
        CheckpointError: ``path`` is missing, a symbolic link, a FIFO, a device or a
            directory (the message names it and says what it is).
    """
    flags = (os.O_RDWR if "+" in mode else os.O_RDONLY) | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing file listed in the manifest.") from None
    except OSError as err:
        if err.errno == errno.ELOOP or os.path.islink(path):
            raise CheckpointError(
                f"{path}: is a symbolic link; a checkpoint's files must be regular files "
                "inside it (links are never followed). Replace the link with the file."
            ) from None
        raise CheckpointError(f"{path}: cannot open ({err}).") from err
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(
                f"{path}: is not a regular file (mode {stat.filemode(info.st_mode)}); a "
                "checkpoint's files must be regular files. Remove it and restore the file."
            )
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return _named(os.fdopen(fd, mode), path)
    except BaseException:
        os.close(fd)
        raise


def _named(f: IO[Any], path: Path) -> IO[Any]:
    """``f`` named by ``path`` (as ``open(path)`` names it), so ``np.memmap(f)`` records it."""
    raw = getattr(f, "raw", None)
    if raw is None:  # text mode
        raw = getattr(getattr(f, "buffer", None), "raw", None)
    if raw is not None:
        raw.name = os.fspath(path)
    return f


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`)."""
    with open_regular(path) as f:
        return f.read()
