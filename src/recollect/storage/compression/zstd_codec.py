"""The zstd codec (``zstandard`` package): the default, with per-store trained dictionaries.

Measured on real ALE frames (``benchmarks/bench_memory.py``): level 1 alone
keeps an 84x84 frame in 171 (Pong) to 1,184 (MsPacman) bytes; with a
dictionary trained on a store's first 2,048 frames, 95 to 330 bytes at
0.8-2.6 us per decode (encoder options chosen per store: :meth:`ZstdCodec.tuned`).
Levels 5-9 decode 15-50% faster still but encode 2.5-5x slower (too slow for
8 frames per ``add_batch``); lz4, even with the same dictionary, is larger
and no faster to decode. A batch decodes as one C call per chunk into the
output (:mod:`~recollect.storage.compression.zstd_native`), split over threads where a
:class:`~recollect.storage.gather.ThreadChooser` measures that faster
(MsPacman ``sample(256, 2)``: 1,280 frames, 4.3 ms on one thread, 2.9 ms on
two cores).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from itertools import pairwise
from typing import Any, Literal

import numpy as np

from recollect.arguments import check_int, is_int
from recollect.errors import InvalidArgumentError
from recollect.storage.compression.codec_base import (
    bounds,
    check_size,
    join,
    segments,
    usable_threads,
)
from recollect.storage.compression.zstd_frames import check_frames
from recollect.storage.compression.zstd_native import (
    CallerShare,
    NativeDecoder,
    NativeEncoder,
    choose_options,
    native_decoder,
    native_encoder,
)
from recollect.storage.gather import ChunkPool, ThreadChooser

__all__ = ["ZstdCodec"]

#: Decodes of at least this many values may use several threads (zstd).
PARALLEL_MIN_VALUES = 64
#: Encodes of at least this many values may use several threads (zstd). An ``add_batch``
#: of 8 frames encodes on one thread: 26-32 us there, 88-168 us split over 2 cores
#: (waking the worker and passing the GIL between values), and trying the split every
#: 64th call cost 5-9 us per call on average.
PARALLEL_MIN_ENCODE = 64
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
            and so is an encode of >= 64 values.
        dictionary_size_bytes: the trained dictionary's largest size; 0 trains none.
        train_values: stored values a store waits for before it trains (values
            of at most 256 KiB; at most 32 MiB of them are used).
        min_match: zstd's minimum match length, 3-7, or 0 for the level's
            default. None (default): chosen with the dictionary (:meth:`tuned`).
        raw_literals: store literals as they are instead of Huffman-coding
            them: frames 2-3% larger that decode 10-14% faster (MsPacman,
            SpaceInvaders, Seaquest frames). None (default): chosen with the
            dictionary (:meth:`tuned`). Both options need the ``cffi``
            package (in the ``compression`` extra); without it zstd's defaults
            are used. Either way every frame decodes with any zstd.

    Raises:
        InvalidArgumentError: the ``zstandard`` package is not installed,
            ``level`` is not an int in ``[-7, 22]``, ``dictionary_size_bytes``
            not 0 or in ``[1024, 2**20]``, ``train_values`` not in ``[16, 2**20]``,
            ``min_match`` not None, 0 or in ``[3, 7]``, or ``raw_literals`` not
            None or a bool.
    """

    name = "zstd"

    def __init__(
        self,
        level: int = 1,
        threads: int | None = None,
        dictionary_size_bytes: int = DICTIONARY_SIZE_BYTES,
        train_values: int = TRAIN_VALUES,
        min_match: int | None = None,
        raw_literals: bool | None = None,
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
        if min_match is not None and not (is_int(min_match) and min_match in (0, 3, 4, 5, 6, 7)):
            raise InvalidArgumentError(
                f"zstd `min_match` must be None (chosen), 0 (the level's default) or an int in "
                f"[3, 7]; got {min_match!r}."
            )
        if raw_literals is not None and not isinstance(raw_literals, (bool, np.bool_)):
            raise InvalidArgumentError(
                f"zstd `raw_literals` must be None (chosen) or a bool; got {raw_literals!r}."
            )
        self.level = level
        self.threads = usable_threads() if threads is None else max(1, int(threads))
        self.dictionary_size_bytes, self.train_values = size, train_values
        self.min_match = None if min_match is None else int(min_match)
        self.raw_literals = None if raw_literals is None else bool(raw_literals)
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
        self._native: NativeDecoder | Literal[False] | None = False  # False: not looked up yet
        self._encoder: NativeEncoder | Literal[False] | None = False
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
        return self._copy(bytes(dictionary), self.min_match, self.raw_literals)

    def _copy(
        self, dictionary: bytes | None, min_match: int | None, raw_literals: bool | None
    ) -> ZstdCodec:
        codec = ZstdCodec(
            self.level, self.threads, self.dictionary_size_bytes, self.train_values,
            min_match, raw_literals,
        )  # fmt: skip
        codec.dictionary = dictionary
        return codec

    def tuned(self, values: np.ndarray) -> ZstdCodec:
        """This codec with the options left None chosen on ``values`` uint8 ``[n, size]``
        (:func:`~recollect.storage.compression.zstd_native.choose_options`: ``min_match`` 7 where
        it makes them smaller, raw literals where they cost at most 5% of the size).
        A store calls it when it trains its dictionary and when it restores one."""
        if self.min_match is not None and self.raw_literals is not None:
            return self
        args = (self.level, self.dictionary, self.min_match, self.raw_literals)
        return self._copy(self.dictionary, *choose_options(values, *args))

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
            return self._encode_part(values)
        split = self._encode_chooser.split(values.nbytes)  # threads where they measure faster
        t0 = time.perf_counter()
        if not split:
            encoded = self._encode_part(values)
        else:
            chunks = bounds(n, self.threads)
            parts: dict[int, tuple[bytes, np.ndarray]] = {}

            def encode(a: int, b: int) -> None:
                parts[a] = self._encode_part(values[a:b])

            self._pool.run(encode, chunks)
            ordered = [parts[a] for a in chunks[:-1]]
            encoded = b"".join(p[0] for p in ordered), np.concatenate([p[1] for p in ordered])
        self._encode_chooser.record(values.nbytes, split, time.perf_counter() - t0)
        return encoded

    def _encode_part(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        encoder = self._native_encoder()
        if encoder is not None:
            return encoder.encode(np.ascontiguousarray(values))
        return join(list(map(self._context("c").compress, values)))  # C-level map; GIL released

    def _native_encoder(self) -> NativeEncoder | None:
        """The cffi encoder when an option zstd's C backend lacks is on, else None."""
        encoder = self._encoder
        if encoder is False:
            on = bool(self.min_match) or bool(self.raw_literals)
            args = (self.level, self.dictionary, self.min_match or 0, bool(self.raw_literals))
            encoder = self._encoder = native_encoder(*args) if on else None
        return encoder

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        """Decodes the batch (split over threads when that measures faster) straight into ``out``.

        The segments are joined and decoded as one run of zstd frames into
        ``out``: one C call per chunk, no bytes object per value. With
        python-zstandard's cffi backend (:mod:`~recollect.storage.compression.zstd_native`)
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
            self._decode_split(native, data, offsets, lengths, out)
        self._chooser.record(out.nbytes, split, time.perf_counter() - t0)

    def _decode_split(
        self,
        native: NativeDecoder,
        data: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        out: np.ndarray,
    ) -> None:
        """One chunk per thread, the caller's larger by the workers' start delay
        (:class:`~recollect.storage.compression.zstd_native.CallerShare`).

        Each chunk's frames are joined here, before the workers start: the join
        holds the GIL, so a worker that joined its own would wait for the
        caller's join and then make the caller wait for its own (measured: a
        worker then starts 300-900 us late instead of about 40 us), while the
        decodes release the GIL and run side by side."""
        share, caller = self._share, threading.get_ident()
        cuts = share.bounds(len(offsets), self.threads)
        sources = {
            a: b"".join(segments(data, offsets[a:b], lengths[a:b])) for a, b in pairwise(cuts)
        }
        started: list[float] = []
        posted = time.perf_counter()

        def decode(a: int, b: int) -> None:
            begin = time.perf_counter()
            if threading.get_ident() != caller:
                started.append(begin - posted)
            if b > a:
                native.decode_into(sources[a], out[a:b])
            if a == 0:
                share.record_values(time.perf_counter() - begin, b)

        self._pool.run(decode, cuts)
        share.record_wake(min(started) if started else time.perf_counter() - posted)

    def _native_decoder(self) -> NativeDecoder | None:
        native = self._native
        if native is False:
            native = self._native = native_decoder(self.dictionary)
        return native

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

    def check_values(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, size: int
    ) -> tuple[int, str] | None:
        """The first value (position, reason) that is not exactly one zstd frame stating
        content size ``size``, or None
        (:func:`~recollect.storage.compression.zstd_frames.check_frames`:
        headers only, vectorized; a store restoring values then decodes them)."""
        return check_frames(data, offsets, lengths, size)

    def config(self) -> dict[str, Any]:
        """``{"name", "level"}``, plus the dictionary options where they are not the defaults."""
        config: dict[str, Any] = {"name": self.name, "level": self.level}
        if self.dictionary_size_bytes != DICTIONARY_SIZE_BYTES:
            config["dictionary_size_bytes"] = self.dictionary_size_bytes
        if self.train_values != TRAIN_VALUES:
            config["train_values"] = self.train_values
        if self.min_match is not None:
            config["min_match"] = self.min_match
        if self.raw_literals is not None:
            config["raw_literals"] = self.raw_literals
        return config

    def bound(self, size: int) -> int:
        return size + (size >> 8) + 64 + (0 if size >= 128 << 10 else ((128 << 10) - size) >> 11)
