"""Standard ``.npy`` files written straight from ring storage and read straight back.

Leaf columns are streamed between the ring arrays and the file in at most two
contiguous pieces per env row (no gathered copy of the data) and checksummed
on the way, on a worker thread that overlaps the I/O (zlib and hashlib release
the GIL), so saving and loading cost about one pass over the bytes and no
extra RAM. The files are ordinary ``.npy`` (``np.load(..., allow_pickle=False)``
reads them).

Checksums are tagged with their algorithm, ``"crc32:1a2b3c4d"`` (written; it
detects damage at ~2 GB/s) or ``"sha256:<hex>"`` (also accepted on load).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np

from recollect.errors import CheckpointError
from recollect.state.safe_files import create_new, open_regular
from recollect.state.space import disk_full_error

__all__ = [
    "column_ranges",
    "map_npy",
    "mmap_columns",
    "read_array",
    "read_columns_into",
    "verify_file",
    "write_array",
    "write_columns",
]

ALGORITHM = "crc32"
_CHUNK_BYTES = 1 << 26  # write/read pieces: checksummed on the worker while the next is copied
_VERIFY_BYTES = 1 << 23  # the two reusable buffers of verify_file (mmap loads)
_THREADED_BYTES = 1 << 22  # files smaller than this are checksummed inline


class Digest:
    """Running checksum of a byte stream, optionally computed on one worker thread.

    Chunks are checksummed in the order given. With ``threaded=True`` a chunk
    must not be modified until :meth:`wait` or :meth:`value` returns.
    """

    def __init__(self, algorithm: str = ALGORITHM, threaded: bool = False) -> None:
        if algorithm not in ("crc32", "sha256"):
            raise CheckpointError(f"unknown checksum algorithm {algorithm!r}.")
        self.algorithm = algorithm
        self._crc = 0
        self._sha = hashlib.sha256() if algorithm == "sha256" else None
        self._pool = ThreadPoolExecutor(1) if threaded else None
        self._last: Future | None = None

    def _update(self, data: memoryview | bytes) -> None:
        if self._sha is not None:
            self._sha.update(data)
        else:
            self._crc = zlib.crc32(data, self._crc)

    def update(self, data: memoryview | bytes) -> Future | None:
        """Adds ``data``; when threaded, returns the future that finishes with this chunk."""
        if self._pool is not None:
            try:
                self._last = self._pool.submit(self._update, data)
                return self._last
            except RuntimeError:  # interpreter shutdown (an atexit flush): no new threads
                self.wait()
                self._pool = None
        self._update(data)
        return None

    def wait(self) -> None:
        """Blocks until every chunk given so far is checksummed."""
        if self._last is not None:
            self._last.result()

    def value(self) -> str:
        """``"algorithm:hex"``; ends the worker thread."""
        self.wait()
        if self._pool is not None:
            self._pool.shutdown()
        digest = self._sha.hexdigest() if self._sha is not None else f"{self._crc:08x}"
        return f"{self.algorithm}:{digest}"


def _digest_for(expected: str, size: int, path: Path) -> Digest:
    algorithm = expected.split(":", 1)[0] if isinstance(expected, str) else ""
    if algorithm not in ("crc32", "sha256"):
        raise CheckpointError(f"{path}: unknown checksum {expected!r} in the manifest.")
    return Digest(algorithm, threaded=size >= _THREADED_BYTES)


def _mismatch(path: Path) -> CheckpointError:
    return CheckpointError(
        f"{path}: checksum mismatch; the file is damaged or was altered. "
        "Discard this checkpoint or restore the file."
    )


def column_ranges(max_length: int, offset: int, count: int) -> list[tuple[int, int]]:
    """Slot ranges ``[a, b)`` of columns ``j < count``, column ``j`` = slot ``(offset + j) % L``."""
    first = offset % max_length
    n1 = min(count, max_length - first)
    ranges = [(first, first + n1)] if n1 else []
    if count > n1:
        ranges.append((0, count - n1))
    return ranges


def _header(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    buf = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def _chunks(pieces: list[np.ndarray]) -> Iterator[memoryview]:
    """Byte views of ``pieces`` in C order, in chunks of at most ``_CHUNK_BYTES`` (a piece
    that is not C-contiguous, such as a time-major ring's leaf, is copied a chunk at a time)."""
    for part in _parts(pieces):
        view = np.ascontiguousarray(part).reshape(-1).view(np.uint8).data
        for start in range(0, len(view), _CHUNK_BYTES):
            yield view[start : start + _CHUNK_BYTES]


def _parts(pieces: list[np.ndarray]) -> Iterator[np.ndarray]:
    """Views of ``pieces`` in C order that together cover them: the C-contiguous pieces
    whole, the others as leading-axis slices of at most ``_CHUNK_BYTES`` (or single
    entries, split further), so that a write or read copies through bounded scratch."""
    for piece in pieces:
        if piece.flags.c_contiguous:
            yield piece
        elif piece.ndim == 1 or piece[:1].nbytes <= _CHUNK_BYTES:
            step = max(1, _CHUNK_BYTES // max(1, piece[:1].nbytes))
            for start in range(0, len(piece), step):
                yield piece[start : start + step]
        else:
            yield from _parts(list(piece))


def _write(path: Path, head: bytes, pieces: list[np.ndarray], nbytes: int) -> tuple[str, int]:
    digest = Digest(threaded=nbytes >= _THREADED_BYTES)
    try:
        with create_new(path) as f:
            f.write(head)
            digest.update(head)
            for chunk in _chunks(pieces):
                digest.update(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            return digest.value(), f.tell()
    except OSError as err:
        digest.value()  # ends the worker thread
        path.unlink(missing_ok=True)  # a new file: nothing half-written stays
        full = disk_full_error(err, path, len(head) + nbytes)
        if full is None or full is err:
            raise
        raise full from err


def write_columns(path: Path, array: np.ndarray, offset: int, count: int) -> tuple[str, int]:
    """Writes ``count`` columns of ``array`` ``[num_envs, L, *shape]`` to a ``.npy`` file.

    The file holds ``[num_envs, count, *shape]``; column ``j`` is ring slot
    ``(offset + j) % L``.

    Returns:
        ``(checksum, size in bytes)`` of the file, which is fsynced.
    """
    num_envs, max_length = array.shape[:2]
    if count == max_length and offset % max_length == 0:
        pieces = [array]
    else:
        ranges = column_ranges(max_length, offset, count)
        pieces = [array[r, a:b] for r in range(num_envs) for a, b in ranges]
    head = _header((num_envs, count, *array.shape[2:]), array.dtype)
    return _write(path, head, pieces, sum(p.nbytes for p in pieces))


def write_array(path: Path, array: np.ndarray) -> tuple[str, int]:
    """Writes one array as ``.npy``; returns ``(checksum, size in bytes)``."""
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise CheckpointError(f"{path.name}: cannot checkpoint an object array.")
    return _write(path, _header(array.shape, array.dtype), [array], array.nbytes)


def _open(path: Path) -> Any:
    return open_regular(path)  # no link, FIFO or device: CheckpointError


_MAGIC = b"\x93NUMPY"
_HEADER_LENGTH = {(1, 0): 2, (2, 0): 4}  # bytes of the little-endian header length field
# numpy's own header writer (which `_header` uses) writes exactly this form.
_HEADER = re.compile(
    r"\{'descr': '(?P<descr>[^']*)', 'fortran_order': (?P<fortran>True|False), "
    r"'shape': \((?P<shape>[0-9, ]*)\), \}\s*"
)


def _read_header(f, path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """Shape, dtype and data offset of an ``.npy`` file (format versions 1.0 and 2.0).

    Parses the header itself instead of calling numpy's reader: that one runs
    ``ast.literal_eval``, which CPython 3.11 can fail with a spurious ``SystemError``
    ("AST constructor recursion depth mismatch", cpython gh-106905) while another
    thread builds an AST (a lazy import compiling a module, say). Headers in another
    form (a structured dtype) still go through numpy's reader.

    Raises:
        CheckpointError: not an ``.npy`` file, an unknown version, a damaged header,
            fortran order or an object dtype.
    """
    try:
        lead = f.read(len(_MAGIC) + 2)
        version = (lead[-2], lead[-1]) if len(lead) == len(_MAGIC) + 2 else None
        if not lead.startswith(_MAGIC) or version not in _HEADER_LENGTH:
            raise ValueError(f"expected the .npy magic and version 1.0 or 2.0, found {lead!r}")
        width = _HEADER_LENGTH[version]
        length = int.from_bytes(f.read(width), "little")
        text = f.read(length).decode("latin1")
        if len(text) != length:
            raise ValueError(f"header of {length} bytes cut short at {len(text)}")
        match = _HEADER.fullmatch(text)
        if match is None:  # not numpy's default writer form: let numpy parse it
            f.seek(len(_MAGIC) + 2)
            reader = {
                (1, 0): np.lib.format.read_array_header_1_0,
                (2, 0): np.lib.format.read_array_header_2_0,
            }[version]
            shape, fortran, dtype = reader(f)
        else:
            dims = [d for d in match["shape"].replace(" ", "").split(",") if d]
            shape, fortran = tuple(int(d) for d in dims), match["fortran"] == "True"
            dtype = np.dtype(match["descr"])
    except Exception as err:
        raise CheckpointError(f"{path}: not a valid .npy file ({err}).") from err
    if fortran or dtype.hasobject:
        raise CheckpointError(f"{path}: unsupported .npy layout (fortran order or object dtype).")
    return tuple(shape), dtype, f.tell()


def _check_size(path: Path, actual: int, expected: int, source: str) -> None:
    if actual != expected:
        what = "truncated" if actual < expected else "has trailing bytes"
        raise CheckpointError(f"{path}: {what} ({actual} bytes, {source} says {expected}).")


def _check_layout(path: Path, f, want_shape: tuple, want_dtype: np.dtype, size: int) -> int:
    shape, dtype, data_offset = _read_header(f, path)
    if shape != tuple(want_shape) or dtype != want_dtype:
        raise CheckpointError(
            f"{path}: holds {dtype} {shape}, the manifest expects {want_dtype} {tuple(want_shape)}."
        )
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    _check_size(path, size, data_offset + nbytes, "its .npy header")
    return data_offset


def read_columns_into(
    path: Path, dest: np.ndarray, offset: int, count: int, checksum: str, size: int
) -> None:
    """Reads a :func:`write_columns` file back into ``dest`` ``[num_envs, max_length, *shape]``.

    Raises:
        CheckpointError: missing, truncated, wrong shape/dtype, or checksum mismatch.
    """
    num_envs, max_length = dest.shape[:2]
    with _open(path) as f:
        _check_size(path, os.fstat(f.fileno()).st_size, size, "the manifest")
        want = (num_envs, count, *dest.shape[2:])
        data_offset = _check_layout(path, f, want, dest.dtype, size)
        f.seek(0)
        digest = _digest_for(checksum, size, path)
        digest.update(f.read(data_offset))
        ranges = column_ranges(max_length, offset, count)
        pieces = [dest[r, a:b] for r in range(num_envs) for a, b in ranges]
        for piece in _parts(pieces):
            chunk = piece if piece.flags.c_contiguous else np.empty(piece.shape, piece.dtype)
            for part in _chunks([chunk]):
                if f.readinto(part) != len(part):
                    raise CheckpointError(f"{path}: truncated while reading.")
                digest.update(part)
            if chunk is not piece:
                piece[...] = chunk
    if digest.value() != checksum:
        raise _mismatch(path)


def verify_file(path: Path, checksum: str, size: int) -> None:
    """Streams ``path`` through its checksum (double-buffered) and compares with the manifest.

    Raises:
        CheckpointError: missing, wrong size (truncated) or checksum mismatch.
    """
    with _open(path) as f:
        _verify_open(f, path, checksum, size)


def _verify_open(f: Any, path: Path, checksum: str, size: int) -> None:
    """:func:`verify_file` of the open file ``f`` (read from its start)."""
    _check_size(path, os.fstat(f.fileno()).st_size, size, "the manifest")
    f.seek(0)
    digest = _digest_for(checksum, size, path)
    buffers = [bytearray(min(size, _VERIFY_BYTES)) for _ in range(2)]
    pending: list[Future | None] = [None, None]
    k = 0
    while True:
        b = k % 2
        previous = pending[b]
        if previous is not None:
            previous.result()  # this buffer's previous chunk is checksummed
        view = memoryview(buffers[b])
        n = f.readinto(view)
        if not n:
            break
        pending[b] = digest.update(view[:n])
        k += 1
    if digest.value() != checksum:
        raise _mismatch(path)


def read_array(path: Path, checksum: str, size: int) -> np.ndarray:
    """Loads a small ``.npy`` after checking size and checksum (``allow_pickle=False``)."""
    with _open(path) as f:
        raw = f.read()
    _check_size(path, len(raw), size, "the manifest")
    digest = _digest_for(checksum, 0, path)
    digest.update(raw)
    if digest.value() != checksum:
        raise _mismatch(path)
    shape, dtype, offset = _read_header(io.BytesIO(raw), path)
    count = int(np.prod(shape, dtype=np.int64))
    _check_size(path, len(raw), offset + count * dtype.itemsize, "its .npy header")
    return np.frombuffer(raw, dtype, count, offset).reshape(shape).copy()


def mmap_columns(
    path: Path, shape: tuple[int, ...], dtype: np.dtype, checksum: str, size: int
) -> np.ndarray:
    """Verifies ``path`` then maps it copy-on-write: writes stay private to this process.

    The file is opened once: what is mapped is the file that was verified, even
    when a concurrent save renames another file to ``path`` meanwhile.

    Returns a plain ``np.ndarray`` view of the mapping (not a ``np.memmap``).
    """
    with _open(path) as f:
        _verify_open(f, path, checksum, size)
        f.seek(0)
        data_offset = _check_layout(path, f, shape, dtype, size)
        if int(np.prod(shape, dtype=np.int64)) == 0:
            return np.zeros(shape, dtype)
        return np.asarray(np.memmap(f, dtype, mode="c", offset=data_offset, shape=tuple(shape)))


def map_npy(path: Path, mode: Literal["r+", "c"] = "r+") -> np.ndarray:
    """The ``.npy`` file ``path`` mapped read-write (``mode="r+"``) or copy-on-write
    (``"c"``: writes stay private to this process, the file is opened read-only), opened
    as a regular file (no link, FIFO or device:
    :func:`~recollect.state.safe_files.open_regular`).

    Raises:
        CheckpointError: not a regular file, not a valid ``.npy`` (object dtype or
            fortran order), or shorter than its header describes (numpy would silently
            zero-extend a torn file).
    """
    with open_regular(path, "r+b" if mode == "r+" else "rb") as f:
        shape, dtype, offset = _read_header(f, path)
        needed = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = os.fstat(f.fileno()).st_size
        if size < needed:
            raise CheckpointError(
                f"{path} is truncated ({size} bytes, its header needs {needed}); the "
                "directory is damaged. Delete it to start over, or restore it from a checkpoint."
            )
        if needed == offset:  # nothing to map
            return np.zeros(shape, dtype)
        return np.memmap(f, dtype, mode=mode, offset=offset, shape=shape)
