"""The zstd codec (``zstandard`` package): the default, with per-store trained dictionaries.

Measured on real ALE frames (``benchmarks/bench_memory.py``): level 1 alone
keeps an 84x84 frame in 171 (Pong) to 1,184 (MsPacman) bytes at 4-8 us per
decode; with a dictionary trained on a store's first 2,048 frames, 95 to 370
bytes at 2-3.5 us. Levels 5-6 (greedy, lazy) decode 15-30% faster still but
encode 3-4x slower (too slow for 8 frames per ``add_batch``); lz4, even with
the same dictionary, is larger and no faster to decode. A batch decodes as one
stream of frames read into the output (``read_across_frames``), the GIL
released while zstd works; large batches are split over threads when that
measures faster. python-zstandard releases the GIL once per frame, so two
threads decoding small frames hand the GIL back and forth at every frame:
splitting pays for large batches of large frames (MsPacman ``sample(256, 2)``:
about 20% less wall time with a free core) and can lose for small or very
compressible ones, which is why a :class:`~recollect.storage.gather.ThreadChooser`
measures both per batch size.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

import numpy as np

from recollect.arguments import check_int, is_int
from recollect.errors import InvalidArgumentError
from recollect.storage.codec_base import (
    bounds,
    check_size,
    join,
    segments,
    usable_threads,
)
from recollect.storage.gather import ChunkPool, ThreadChooser
from recollect.storage.zstd_native import CallerShare, NativeDecoder, native_decoder

__all__ = ["ZstdCodec"]

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


class ZstdCodec:
    """Zstandard (``zstandard`` package, ``pip install recollect[compression]``).

    Small values such as 84x84 frames share most of their content (borders,
    score boxes, backgrounds) and each compressed value starts from nothing,
    so a dictionary trained on the first values of a leaf (zstd's own
    ``train_dictionary``) makes them 2-4x smaller AND about 2x faster to
    decode and encode. A store trains one once ``train_values`` values are
    stored (one pause of 0.1-0.2 s for 2,048 84x84 frames, the values then
    re-encoded with it) and keeps it in its checkpoints; it is kept only when it shrinks the
    stored values by at least 10%.

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
        level = check_int("level", level, minimum=-7, maximum=22, show_name=False, owner="zstd")
        size = dictionary_size_bytes
        if not is_int(size) or not (size == 0 or 1024 <= size <= 1 << 20):
            raise InvalidArgumentError(
                "zstd `dictionary_size_bytes` must be 0 (no dictionary) or an int in "
                f"[1024, 1048576]; got {size!r}."
            )
        size = int(size)
        train_values = check_int(
            "train_values", train_values, minimum=16, maximum=1 << 20, show_name=False, owner="zstd"
        )
        self.level = level
        self.threads = usable_threads() if threads is None else max(1, int(threads))
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
        self._native: NativeDecoder | bool | None = False  # False: not looked up yet
        self._share = CallerShare()
        weakref.finalize(self, self._pool.stop)

    # -- dictionaries ---------------------------------------------------------
    def trains(self, size: int) -> bool:
        """Whether a store of values of ``size`` bytes trains a dictionary."""
        untrained = self.dictionary is None
        return untrained and self.dictionary_size_bytes > 0 and size <= MAX_TRAIN_SIZE

    def train(self, values: np.ndarray) -> bytes | None:
        """A dictionary trained on ``values`` uint8 ``[n, size]``, or None when zstd
        cannot train one (too few or too uniform values)."""
        take = max(16, TRAIN_BYTES // max(1, values.shape[1]))
        samples: list[bytes | bytearray | memoryview] = list(map(bytes, values[:take]))
        size = min(self.dictionary_size_bytes, max(1024, sum(map(len, samples)) // 8))
        try:  # fixed COVER parameters: tens of ms (the parameter search takes 5x longer)
            trained = self._zstd.train_dictionary(
                size, samples, k=min(1024, size), d=8, f=20, steps=1, level=max(1, self.level)
            )
        except self._zstd.ZstdError:
            return None
        return trained.as_bytes()

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
            return join(self._encode_part(values))
        split = self._encode_chooser.split(values.nbytes)  # threads where they measure faster
        t0 = time.perf_counter()
        if not split:
            parts = self._encode_part(values)
        else:
            parts = [b""] * n

            def encode(a: int, b: int) -> None:
                parts[a:b] = self._encode_part(values[a:b])

            self._pool.run(encode, bounds(n, self.threads))
        self._encode_chooser.record(values.nbytes, split, time.perf_counter() - t0)
        return join(parts)

    def _encode_part(self, values: np.ndarray) -> list[bytes]:
        return list(map(self._context("c").compress, values))  # C-level map; GIL released

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        """Decodes the batch (split over threads when that measures faster) straight into ``out``.

        The segments are joined and decoded as one run of zstd frames into
        ``out``: one C call per chunk, no bytes object per value. With
        python-zstandard's cffi backend (:mod:`~recollect.storage.zstd_native`)
        the GIL is released for the whole chunk, so chunks decode side by side
        on several cores; otherwise its stream reader takes the GIL back after
        every frame.
        """
        n = len(offsets)
        native = self._native_decoder()
        if n < PARALLEL_MIN_VALUES or self.threads == 1:
            self._decode_part(native, data, offsets, lengths, out)
            return
        split = self._chooser.split(out.nbytes)  # threads only where they measure faster
        t0 = time.perf_counter()
        if not split:
            self._decode_part(native, data, offsets, lengths, out)
            self._share.record_values(time.perf_counter() - t0, n)
        elif native is None:  # the stream reader: one chunk per thread, fewer GIL handoffs

            def decode(a: int, b: int) -> None:
                self._decode_part(native, data, offsets[a:b], lengths[a:b], out[a:b])

            self._pool.run(decode, bounds(n, self.threads))
        else:
            self._decode_split(native, data, offsets, lengths, out, t0)
        self._chooser.record(out.nbytes, split, time.perf_counter() - t0)

    def _decode_split(
        self,
        native: NativeDecoder,
        data: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        out: np.ndarray,
        t0: float,
    ) -> None:
        """One chunk per thread, the caller's larger by the workers' start delay
        (:class:`~recollect.storage.zstd_native.CallerShare`)."""
        share, caller = self._share, threading.get_ident()
        started: list[float] = []

        def decode(a: int, b: int) -> None:
            begin = time.perf_counter()
            if threading.get_ident() != caller:
                started.append(begin - t0)
            self._decode_part(native, data, offsets[a:b], lengths[a:b], out[a:b])
            if a == 0:
                share.record_values(time.perf_counter() - begin, b)

        self._pool.run(decode, share.bounds(len(offsets), self.threads))
        share.record_wake(min(started) if started else time.perf_counter() - t0)

    def _native_decoder(self) -> NativeDecoder | None:
        native = self._native
        if native is False:
            native = self._native = native_decoder(self.dictionary)
        return native  # type: ignore[return-value]

    def _decode_part(
        self,
        native: NativeDecoder | None,
        data: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        out: np.ndarray,
    ) -> None:
        if not len(offsets):
            return
        source = b"".join(segments(data, offsets, lengths))
        if native is not None:
            native.decode_into(source, out)
            return
        reader = self._context("d").stream_reader(source, read_across_frames=True)
        view, done = out.data.cast("B"), 0
        while done < out.nbytes:  # one pass in practice; a loop over reads, not values
            got = reader.readinto(view[done:])
            if not got:
                break
            done += got
        check_size(done, out.nbytes)

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
