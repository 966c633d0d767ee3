"""Codecs for compressed leaves: zstd (default), lz4 and zlib (always available).

A codec turns ``n`` equal-sized values (rows of a uint8 array ``[n, size]``)
into one contiguous byte string plus ``n`` lengths, and decodes segments
``(offset, length)`` of a large byte array back into a ``[n, size]`` array.
Chosen by measurement on real ALE frames (``benchmarks/bench_memory.py``):
zstd level 1 keeps an 84x84 frame in 171 (Pong) to 1,184 (MsPacman) bytes,
646 on average over five games, at 35k-120k frames/s; lz4 is 3x faster to
decode but 48% larger (956 B on average); zlib level 1 is 15% larger than
zstd and slower both ways. zstd decodes a batch in ONE call
(``multi_decompress_to_buffer``, threads in C, the GIL released); lz4 and
zlib release the GIL per value.
"""

from __future__ import annotations

import concurrent.futures
import functools
import itertools
import os
import threading
import time
import weakref
import zlib
from typing import Any, Protocol, runtime_checkable

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.storage.gather import ThreadChooser

__all__ = [
    "CODECS",
    "Codec",
    "Lz4Codec",
    "ZlibCodec",
    "ZstdCodec",
    "codec_from_config",
    "json_compression",
    "resolve",
]

#: Decodes of at least this many values use several threads (zstd).
PARALLEL_MIN_VALUES = 256
#: Encodes of at least this many values may use several threads (zstd).
PARALLEL_MIN_ENCODE = 8
_POOL_LOCK = threading.Lock()
_LIVE: weakref.WeakSet = weakref.WeakSet()  # zstd codecs, given fresh threads after fork


def _after_fork() -> None:
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    for codec in list(_LIVE):
        codec.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


@runtime_checkable
class Codec(Protocol):
    """What a compressed leaf needs from a codec."""

    name: str

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        """``values`` uint8 ``[n, size]`` (C order) -> (joined bytes, int64 lengths ``[n]``)."""

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        """Decodes segments ``(offsets, lengths)`` of ``data`` (uint8) into ``out`` uint8
        ``[n, size]`` (C-contiguous)."""

    def config(self) -> dict[str, Any]:
        """JSON-safe ``{"name": ..., "level": ...}`` that :func:`codec_from_config` reads."""

    def bound(self, size: int) -> int:
        """Largest encoded length of one value of ``size`` bytes."""


def _join(parts: list[bytes]) -> tuple[bytes, np.ndarray]:
    return b"".join(parts), np.fromiter(map(len, parts), np.int64, len(parts))


def _segments(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> Any:
    """Memoryviews of the segments (``map`` of C functions: no bytecode per segment)."""
    ends = offsets + lengths
    view = data.data  # a memoryview of the array's bytes
    return map(view.__getitem__, map(slice, offsets.tolist(), ends.tolist()))


def _check_size(got: int, want: int) -> None:
    if got != want:
        raise ValueError(f"compressed values decoded to {got} bytes; expected {want}.")


class ZstdCodec:
    """Zstandard (``zstandard`` package, ``pip install recollect[compression]``).

    Args:
        level: compression level (1 fastest standard level; negative levels
            are faster still and larger; up to 22).
        threads: threads decoding one batch (default: usable CPUs, at most 4);
            a batch of >= 256 values is split over them when that measures
            faster than one thread (:class:`~recollect.storage.gather.ThreadChooser`),
            and so is an encode of >= 8 values (one ``add_batch`` of 8 envs).

    Raises:
        InvalidArgumentError: the ``zstandard`` package is not installed, or
            ``level`` is not an int in ``[-7, 22]``.
    """

    name = "zstd"

    def __init__(self, level: int = 1, threads: int | None = None) -> None:
        try:
            import zstandard
        except ImportError as err:
            raise InvalidArgumentError(
                "compression codec 'zstd' needs the zstandard package; install it with "
                "`pip install recollect[compression]` or use codec 'zlib'."
            ) from err
        if isinstance(level, bool) or not isinstance(level, int) or not -7 <= level <= 22:
            raise InvalidArgumentError(f"zstd `level` must be an int in [-7, 22]; got {level!r}.")
        self.level = level
        self.threads = _threads() if threads is None else max(1, int(threads))
        self._zstd = zstandard
        self.reset()
        _LIVE.add(self)

    def reset(self) -> None:
        """Fresh per-thread contexts, decode threads and chooser (after ``fork``)."""
        self._local = threading.local()  # zstd contexts are per thread (not thread-safe)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._chooser = ThreadChooser()
        self._encode_chooser = ThreadChooser()

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        n = len(values)
        if n < PARALLEL_MIN_ENCODE or self.threads == 1:
            return _join(self._encode_part(values))
        split = self._encode_chooser.split(values.nbytes)  # threads where they measure faster
        t0 = time.perf_counter()
        if not split:
            parts = self._encode_part(values)
        else:
            bounds = [n * j // self.threads for j in range(self.threads + 1)]
            jobs = [
                self._pool().submit(self._encode_part, values[a:b])
                for a, b in itertools.pairwise(bounds[1:])
            ]
            parts = self._encode_part(values[: bounds[1]])
            for job in jobs:
                parts += job.result()
        self._encode_chooser.record(values.nbytes, split, time.perf_counter() - t0)
        return _join(parts)

    def _encode_part(self, values: np.ndarray) -> list[bytes]:
        local = self._local  # zstd contexts are not safe across threads: one per thread
        compress = getattr(local, "compress", None)
        if compress is None:
            compress = local.compress = self._zstd.ZstdCompressor(level=self.level).compress
        return list(map(compress, values))  # C-level map; GIL released per value

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        """Decodes the batch (split over threads when large) straight into ``out``.

        The segments are joined and read as one stream of zstd frames
        (``read_across_frames``) into ``out``: one C call per thread, the GIL
        released while it decodes, no bytes object per value.
        """
        n = len(offsets)
        if n < PARALLEL_MIN_VALUES or self.threads == 1:
            self._decode_part(data, offsets, lengths, out)
            return
        split = self._chooser.split(out.nbytes)  # threads only where they measure faster
        t0 = time.perf_counter()
        if not split:
            self._decode_part(data, offsets, lengths, out)
        else:
            bounds = [n * j // self.threads for j in range(self.threads + 1)]
            jobs = [
                self._pool().submit(self._decode_part, data, offsets[a:b], lengths[a:b], out[a:b])
                for a, b in itertools.pairwise(bounds[1:])
            ]
            head = slice(0, bounds[1])
            self._decode_part(data, offsets[head], lengths[head], out[head])
            for job in jobs:
                job.result()
        self._chooser.record(out.nbytes, split, time.perf_counter() - t0)

    def _decode_part(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        if not len(offsets):
            return
        local = self._local
        if not hasattr(local, "decompressor"):
            local.decompressor = self._zstd.ZstdDecompressor()
        source = b"".join(_segments(data, offsets, lengths))
        reader = local.decompressor.stream_reader(source, read_across_frames=True)
        view, done = out.data.cast("B"), 0
        while done < out.nbytes:  # one pass in practice; a loop over reads, not values
            got = reader.readinto(view[done:])
            if not got:
                break
            done += got
        _check_size(done, out.nbytes)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with _POOL_LOCK:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self.threads - 1, thread_name_prefix="recollect-zstd"
                )
            return self._executor

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "level": self.level}

    def bound(self, size: int) -> int:
        return size + (size >> 8) + 64 + (0 if size >= 128 << 10 else ((128 << 10) - size) >> 11)


class Lz4Codec:
    """LZ4 block format (``lz4`` package): fastest to decode, larger than zstd.

    Args:
        level: 0 for the fast mode; 1-12 for high compression (slow to encode).

    Raises:
        InvalidArgumentError: ``lz4`` is not installed or ``level`` not in ``[0, 12]``.
    """

    name = "lz4"

    def __init__(self, level: int = 0) -> None:
        try:
            import lz4.block
        except ImportError as err:
            raise InvalidArgumentError(
                "compression codec 'lz4' needs the lz4 package (`pip install lz4`), or use 'zstd'."
            ) from err
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 12:
            raise InvalidArgumentError(f"lz4 `level` must be an int in [0, 12]; got {level!r}.")
        self.level = level
        self._block = lz4.block
        mode = "high_compression" if level else "default"
        self._kwargs = {"mode": mode, "compression": level, "store_size": False}

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        return _join(list(map(functools.partial(self._block.compress, **self._kwargs), values)))

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        size = out.shape[1] if out.ndim == 2 else out.nbytes
        decode = functools.partial(self._block.decompress, uncompressed_size=size)
        joined = b"".join(map(decode, _segments(data, offsets, lengths)))
        _check_size(len(joined), out.nbytes)
        out.reshape(-1)[:] = np.frombuffer(joined, np.uint8)

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "level": self.level}

    def bound(self, size: int) -> int:
        return size + size // 255 + 16


class ZlibCodec:
    """zlib (standard library): always available; larger and slower than zstd.

    Args:
        level: 0-9 (1 fastest).

    Raises:
        InvalidArgumentError: ``level`` not in ``[0, 9]``.
    """

    name = "zlib"

    def __init__(self, level: int = 1) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
            raise InvalidArgumentError(f"zlib `level` must be an int in [0, 9]; got {level!r}.")
        self.level = level

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        return _join(list(map(functools.partial(zlib.compress, level=self.level), values)))

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        joined = b"".join(map(zlib.decompress, _segments(data, offsets, lengths)))
        _check_size(len(joined), out.nbytes)
        out.reshape(-1)[:] = np.frombuffer(joined, np.uint8)

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "level": self.level}

    def bound(self, size: int) -> int:
        return size + (size >> 12) + (size >> 14) + (size >> 25) + 13 + 6


#: Codec names accepted by ``ReplayBuffer(compression=...)``.
CODECS = {"zstd": ZstdCodec, "lz4": Lz4Codec, "zlib": ZlibCodec}


def json_compression(compression: Any) -> Any:
    """``compression`` (a codec or ``{path: codec}``) with codec objects as their
    JSON-safe ``config()`` (names and config dicts are kept as given)."""
    if isinstance(compression, dict):
        return {path: json_compression(codec) for path, codec in compression.items()}
    if isinstance(compression, Codec):
        return compression.config()
    return compression


def codec_from_config(config: dict[str, Any]) -> Codec:
    """Inverse of ``Codec.config()``.

    Raises:
        InvalidArgumentError: unknown name or bad level.
    """
    return resolve(config.get("name"), "compression", level=config.get("level"))


def resolve(codec: Any, path: str, level: Any = None) -> Codec:
    """A codec object from a name (``"zstd"``, ``"lz4"``, ``"zlib"``), a codec object, or
    ``{"name": ..., "level": ...}`` (``Codec.config()``).

    Raises:
        InvalidArgumentError: an unknown name or an object that is not a :class:`Codec`.
    """
    if isinstance(codec, dict):  # a Codec.config() (checkpoints)
        codec, level = codec.get("name"), codec.get("level")
    if isinstance(codec, str):
        if codec not in CODECS:
            raise InvalidArgumentError(
                f"compression['{path}']: unknown codec {codec!r}; use one of {sorted(CODECS)} "
                "or a codec object such as recollect.storage.codecs.ZstdCodec(level=3)."
            )
        return CODECS[codec]() if level is None else CODECS[codec](level=level)
    if isinstance(codec, Codec):
        return codec
    raise InvalidArgumentError(
        f"compression['{path}'] must be a codec name {sorted(CODECS)} or a codec object; "
        f"got {codec!r}."
    )
