"""Disk space: files reserved on disk before they are mapped, and a full disk as an error.

A memory-mapped file whose blocks are not allocated (a sparse file, as
``ftruncate`` or ``np.lib.format.open_memmap(mode="w+")`` make) runs out of
disk at the first store to a missing page, and the kernel kills the process
with ``SIGBUS``. :func:`create_npy_memmap` therefore reserves every block of a
new ``.npy`` file (``posix_fallocate``, or written zeros where the
filesystem cannot fallocate) before mapping it, and a full disk raises
:class:`~recollect.errors.DiskFullError` (an ``OSError`` with ``errno``
``ENOSPC``) naming the file and the bytes it needs, with the file removed.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from recollect.errors import DiskFullError
from recollect.state.safe_files import create_new

__all__ = ["FULL_ERRNOS", "create_npy_memmap", "disk_full_error", "reserve"]

#: errno values that mean "no room for these bytes" (no space, quota, file too large)
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_ZEROS = 1 << 20


def disk_full_error(err: BaseException, path: Path, needed: int) -> DiskFullError | None:
    """A :class:`DiskFullError` for ``err`` when it means the disk is full, else None.

    Args:
        err: the error a write or an allocation of ``path`` raised.
        path: the file being written.
        needed: the bytes the file needs in all.
    """
    if isinstance(err, DiskFullError):
        return err
    code = getattr(err, "errno", None)
    if code not in FULL_ERRNOS:
        return None
    try:
        free = f"only {shutil.disk_usage(path.parent).free} bytes are"
    except OSError:
        free = "too few bytes are"
    return DiskFullError(
        code,
        f"{path} needs {needed} bytes but {free} free on its filesystem. Free some space, "
        "choose another directory, or reduce capacity (see recollect.estimate_memory)",
    )


def reserve(f: Any, path: Path, needed: int) -> None:
    """Allocates the first ``needed`` bytes of the open file ``f`` on disk (never sparse).

    Uses ``posix_fallocate``; where the filesystem does not support it,
    writes zeros over the bytes not yet written.

    Raises:
        DiskFullError: the filesystem cannot hold ``needed`` bytes.
    """
    try:
        try:
            os.posix_fallocate(f.fileno(), 0, needed)
            return
        except (AttributeError, OSError) as err:
            if getattr(err, "errno", None) not in (None, errno.EOPNOTSUPP, errno.EINVAL):
                raise  # None: no posix_fallocate on this platform
        f.seek(0, os.SEEK_END)
        zeros = bytes(_ZEROS)
        while f.tell() < needed:
            f.write(zeros[: needed - f.tell()])
        f.flush()
    except OSError as err:
        full = disk_full_error(err, path, needed)
        if full is None:
            raise
        raise full from err


def create_npy_memmap(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> np.memmap:
    """A new zero-filled ``.npy`` file at ``path``, every block reserved, mapped ``r+``.

    Args:
        path: the file; an existing file or link there is removed first (a link's
            target is never written: :func:`~recollect.state.safe_files.create_new`).
        shape: the array shape; dtype: its dtype (no object dtypes).

    Raises:
        DiskFullError: the disk cannot hold the file (nothing is left at ``path``).
    """
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
    needed = 0
    try:
        with create_new(path, "w+b") as f:  # never through a planted link
            np.lib.format.write_array_header_1_0(f, {**header, "shape": tuple(shape)})
            offset = f.tell()
            needed = offset + int(np.prod(shape)) * dtype.itemsize
            f.flush()
            reserve(f, path, needed)
            return np.memmap(f, dtype, mode="r+", offset=offset, shape=tuple(shape))
    except BaseException as err:
        path.unlink(missing_ok=True)
        full = disk_full_error(err, path, needed or 128) if isinstance(err, OSError) else None
        if full is None or full is err:
            raise
        raise full from err
