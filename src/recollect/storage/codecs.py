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

import functools
import os
import threading
import time
import weakref
import zlib
from typing import Any, Protocol, runtime_checkable

import numpy as np

from recollect.errors import InvalidArgumentError
from recollect.storage.gather import ChunkPool, ThreadChooser

__all__ = [
    "CODECS",
    "Codec",
    "DictionaryCodec",
    "Lz4Codec",
    "ZlibCodec",
    "ZstdCodec",
    "codec_from_config",
    "json_compression",
    "resolve",
]

#: Decodes of at least this many values may use several threads (zstd).
PARALLEL_MIN_VALUES = 64
#: Encodes of at least this many values may use several threads (zstd).
PARALLEL_MIN_ENCODE = 8
#: Default largest size of a zstd dictionary, and the values a store waits for to train one.
DICTIONARY_SIZE_BYTES = 64 << 10
TRAIN_VALUES = 2048
#: Values larger than this train no dictionary; training reads at most TRAIN_BYTES of values.
MAX_TRAIN_SIZE = 256 << 10
TRAIN_BYTES = 32 << 20
_LIVE: weakref.WeakSet = weakref.WeakSet()  # zstd codecs, given fresh threads after fork


def _after_fork() -> None:
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


@runtime_checkable
class DictionaryCodec(Codec, Protocol):
    """A codec that a store can give a dictionary trained on its first values (zstd)."""

    dictionary: bytes | None
    train_values: int

    def trains(self, size: int) -> bool:
        """Whether a store of values of ``size`` bytes should train a dictionary."""

    def train(self, values: np.ndarray) -> bytes | None:
        """A dictionary for values like ``values`` uint8 ``[n, size]``, or None (no gain)."""

    def with_dictionary(self, dictionary: bytes) -> Codec:
        """A codec that encodes and decodes with ``dictionary``."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bounds(n: int, chunks: int) -> list[int]:
    """Bounds of ``chunks`` near-equal chunks of ``range(n)`` (fewer when ``n`` is small)."""
    chunks = max(1, min(chunks, n))
    return [n * k // chunks for k in range(chunks + 1)]


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

    Small values such as 84x84 frames share most of their content (borders,
    score boxes, backgrounds) and each compressed value starts from nothing,
    so a dictionary trained on the first values of a leaf (zstd's own
    ``train_dictionary``) makes them 2-4x smaller AND about 2x faster to
    decode and encode. A store trains one once ``train_values`` values are
    stored (one pause of tens of milliseconds, the values then re-encoded with
    it) and keeps it in its checkpoints; it is kept only when it shrinks the
    training values by at least 10%.

    Args:
        level: compression level (1 fastest standard level; negative levels
            are faster still and larger; up to 22).
        threads: threads decoding one batch (default: usable CPUs, at most 4);
            a batch of >= 64 values is split over them when that measures
            faster than one thread (:class:`~recollect.storage.gather.ThreadChooser`),
            and so is an encode of >= 8 values (one ``add_batch`` of 8 envs).
        dictionary_size_bytes: the trained dictionary's largest size; 0 trains none.
        train_values: stored values a store waits for before it trains (values
            of at most 256 KiB; at most 32 MiB of them are used).

    Raises:
        InvalidArgumentError: the ``zstandard`` package is not installed,
            ``level`` is not an int in ``[-7, 22]``, ``dictionary_size_bytes``
            not 0 or in ``[1024, 2**20]``, or ``train_values`` not in ``[16, 2**20]``.
    """

    name = "zstd"

    def __init__(
        self,
        level: int = 1,
        threads: int | None = None,
        dictionary_size_bytes: int = DICTIONARY_SIZE_BYTES,
        train_values: int = TRAIN_VALUES,
    ) -> None:
        try:
            import zstandard
        except ImportError as err:
            raise InvalidArgumentError(
                "compression codec 'zstd' needs the zstandard package; install it with "
                "`pip install recollect[compression]` or use codec 'zlib'."
            ) from err
        if not _is_int(level) or not -7 <= level <= 22:
            raise InvalidArgumentError(f"zstd `level` must be an int in [-7, 22]; got {level!r}.")
        size = dictionary_size_bytes
        if not _is_int(size) or not (size == 0 or 1024 <= size <= 1 << 20):
            raise InvalidArgumentError(
                "zstd `dictionary_size_bytes` must be 0 (no dictionary) or an int in "
                f"[1024, 1048576]; got {size!r}."
            )
        if not _is_int(train_values) or not 16 <= train_values <= 1 << 20:
            raise InvalidArgumentError(
                f"zstd `train_values` must be an int in [16, 1048576]; got {train_values!r}."
            )
        self.level = level
        self.threads = _threads() if threads is None else max(1, int(threads))
        self.dictionary_size_bytes, self.train_values = size, train_values
        self.dictionary: bytes | None = None  # set on the copies that with_dictionary returns
        self._zstd = zstandard
        self.reset()
        _LIVE.add(self)

    def reset(self) -> None:
        """Fresh per-thread contexts, threads and choosers (after ``fork``)."""
        self._local = threading.local()  # zstd contexts are per thread (not thread-safe)
        self._pool = ChunkPool(self.threads)
        self._chooser = ThreadChooser()
        self._encode_chooser = ThreadChooser()
        weakref.finalize(self, self._pool.stop)

    # -- dictionaries ---------------------------------------------------------
    def trains(self, size: int) -> bool:
        """Whether a store of values of ``size`` bytes trains a dictionary."""
        untrained = self.dictionary is None
        return untrained and self.dictionary_size_bytes > 0 and size <= MAX_TRAIN_SIZE

    def train(self, values: np.ndarray) -> bytes | None:
        """A dictionary trained on ``values`` uint8 ``[n, size]``, or None when zstd
        cannot train one or it shrinks them by less than 10%."""
        take = max(16, TRAIN_BYTES // max(1, values.shape[1]))
        samples: list[bytes | bytearray | memoryview] = list(map(bytes, values[:take]))
        size = min(self.dictionary_size_bytes, max(1024, sum(map(len, samples)) // 8))
        try:  # fixed COVER parameters: tens of ms (the parameter search takes 5x longer)
            trained = self._zstd.train_dictionary(
                size, samples, k=min(1024, size), d=8, f=20, steps=1, level=max(1, self.level)
            )
        except self._zstd.ZstdError:
            return None
        dictionary = trained.as_bytes()
        plain = sum(map(len, self._encode_part(values)))
        with_dict = sum(map(len, self.with_dictionary(dictionary)._encode_part(values)))
        return dictionary if with_dict <= 0.9 * plain else None

    def with_dictionary(self, dictionary: bytes) -> ZstdCodec:
        """This codec with ``dictionary`` (from :meth:`train`); what it encodes needs it."""
        codec = ZstdCodec(self.level, self.threads, self.dictionary_size_bytes, self.train_values)
        codec.dictionary = bytes(dictionary)
        return codec

    def _context(self, kind: str) -> Any:
        """This thread's compressor (``kind="c"``) or decompressor (``"d"``)."""
        local = self._local  # zstd contexts are not safe across threads: one per thread
        context = getattr(local, kind, None)
        if context is not None:
            return context
        z = self._zstd
        if self.dictionary is None:
            context = z.ZstdCompressor(level=self.level) if kind == "c" else z.ZstdDecompressor()
        elif kind == "c":
            prepared = z.ZstdCompressionDict(self.dictionary, dict_type=z.DICT_TYPE_AUTO)
            prepared.precompute_compress(level=self.level)
            context = z.ZstdCompressor(level=self.level, dict_data=prepared, write_dict_id=False)
        else:
            prepared = z.ZstdCompressionDict(self.dictionary, dict_type=z.DICT_TYPE_AUTO)
            context = z.ZstdDecompressor(dict_data=prepared)
        setattr(local, kind, context)
        return context

    # -- encode / decode ------------------------------------------------------
    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        n = len(values)
        if n < PARALLEL_MIN_ENCODE or self.threads == 1:
            return _join(self._encode_part(values))
        split = self._encode_chooser.split(values.nbytes)  # threads where they measure faster
        t0 = time.perf_counter()
        if not split:
            parts = self._encode_part(values)
        else:
            parts = [b""] * n

            def encode(a: int, b: int) -> None:
                parts[a:b] = self._encode_part(values[a:b])

            self._pool.run(encode, _bounds(n, self.threads))
        self._encode_chooser.record(values.nbytes, split, time.perf_counter() - t0)
        return _join(parts)

    def _encode_part(self, values: np.ndarray) -> list[bytes]:
        return list(map(self._context("c").compress, values))  # C-level map; GIL released

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        """Decodes the batch (split over threads when large) straight into ``out``.

        The segments are joined and read as one stream of zstd frames
        (``read_across_frames``) into ``out``: one C call per chunk of values,
        the GIL released while it decodes, no bytes object per value.
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

            def decode(a: int, b: int) -> None:
                self._decode_part(data, offsets[a:b], lengths[a:b], out[a:b])

            self._pool.run(decode, _bounds(n, 2 * self.threads))
        self._chooser.record(out.nbytes, split, time.perf_counter() - t0)

    def _decode_part(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        if not len(offsets):
            return
        source = b"".join(_segments(data, offsets, lengths))
        reader = self._context("d").stream_reader(source, read_across_frames=True)
        view, done = out.data.cast("B"), 0
        while done < out.nbytes:  # one pass in practice; a loop over reads, not values
            got = reader.readinto(view[done:])
            if not got:
                break
            done += got
        _check_size(done, out.nbytes)

    def config(self) -> dict[str, Any]:
        """``{"name", "level"}``, plus the dictionary options where they are not the defaults."""
        config: dict[str, Any] = {"name": self.name, "level": self.level}
        if self.dictionary_size_bytes != DICTIONARY_SIZE_BYTES:
            config["dictionary_size_bytes"] = self.dictionary_size_bytes
        if self.train_values != TRAIN_VALUES:
            config["train_values"] = self.train_values
        return config

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
        InvalidArgumentError: unknown name, bad level or an option the codec does not take.
    """
    return resolve(config, "compression")


#: Config keys a codec takes besides ``name`` and ``level``.
OPTIONS = {"zstd": ("dictionary_size_bytes", "train_values"), "lz4": (), "zlib": ()}


def resolve(codec: Any, path: str, level: Any = None) -> Codec:
    """A codec object from a name (``"zstd"``, ``"lz4"``, ``"zlib"``), a codec object, or
    ``{"name": ..., "level": ..., **options}`` (``Codec.config()``).

    Raises:
        InvalidArgumentError: an unknown name or option, or an object that is not a
            :class:`Codec`.
    """
    options: dict[str, Any] = {}
    if isinstance(codec, dict):  # a Codec.config() (checkpoints)
        options = {k: v for k, v in codec.items() if k not in ("name", "level")}
        codec, level = codec.get("name"), codec.get("level")
    if isinstance(codec, str):
        if codec not in CODECS:
            raise InvalidArgumentError(
                f"compression['{path}']: unknown codec {codec!r}; use one of {sorted(CODECS)} "
                "or a codec object such as recollect.storage.codecs.ZstdCodec(level=3)."
            )
        unknown = sorted(set(options) - set(OPTIONS[codec]))
        if unknown:
            raise InvalidArgumentError(
                f"compression['{path}']: codec {codec!r} takes no option {unknown}; its "
                f"options are {['level', *OPTIONS[codec]]}."
            )
        if level is not None:
            options["level"] = level
        return CODECS[codec](**options)
    if isinstance(codec, Codec):
        return codec
    raise InvalidArgumentError(
        f"compression['{path}'] must be a codec name {sorted(CODECS)} or a codec object; "
        f"got {codec!r}."
    )
