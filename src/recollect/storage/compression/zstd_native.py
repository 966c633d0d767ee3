"""Batch decoding of zstd frames in one C call per chunk, the GIL released for all of it.

python-zstandard's C backend decodes a stream of frames but takes the GIL
back after every frame, so two threads decoding 84x84 frames (2-4 us each)
pass the GIL back and forth instead of running side by side. Its cffi
backend exposes libzstd itself (``zstandard.backend_cffi.lib``, needs the
``cffi`` package): ``ZSTD_decompress_usingDDict`` decodes concatenated
frames into one contiguous output, and cffi releases the GIL for the whole
call. Measured on real ALE frames (MsPacman, 370 B per frame, 2 cores):
1,280 frames 4.4 ms on one thread, 2.5 ms split over two.

The same backend encodes with the parameters python-zstandard does not
take (:class:`NativeEncoder`): raw literals and a chosen minimum match
length, which make 84x84 frames 10-26% faster to decode (measured per game
in :meth:`~recollect.storage.compression.zstd_codec.ZstdCodec.tuned`).

:func:`native_decoder` and :func:`native_encoder` return None when the cffi
backend cannot be imported; :class:`~recollect.storage.compression.zstd_codec.ZstdCodec`
then uses python-zstandard's C backend (the same frames decode either way).
"""

from __future__ import annotations

import threading
from itertools import repeat
from typing import Any

import numpy as np

from recollect.storage.compression.codec_base import segments

__all__ = [
    "CallerShare",
    "NativeDecoder",
    "NativeEncoder",
    "choose_options",
    "native_decoder",
    "native_encoder",
]

#: A :class:`NativeEncoder` keeps output slots for this many values per thread.
SCRATCH_VALUES = 64
#: :func:`choose_options` encodes at most this many values with each choice ...
TUNE_VALUES = 256
#: ... of at least this many bytes (smaller values keep zstd's defaults) ...
TUNE_MIN_SIZE = 1024
#: ... and takes raw literals when they make the values at most this much larger.
RAW_LITERALS_MAX_COST = 0.05


def _owned(ffi: Any, made: Any, free: Any, what: str) -> Any:
    """``made`` (a libzstd object), freed with ``free`` once collected.

    Raises:
        MemoryError: libzstd returned NULL (it could not ``what``).
    """
    if made == ffi.NULL:
        raise MemoryError(f"libzstd could not {what}.")
    return ffi.gc(made, free)


def _error_name(ffi: Any, lib: Any, code: int) -> str:
    """libzstd's name of the error ``code``."""
    return ffi.string(lib.ZSTD_getErrorName(code)).decode()


class NativeDecoder:
    """Decodes concatenated zstd frames into a contiguous array (libzstd via cffi).

    Args:
        ffi, lib: ``zstandard.backend_cffi``'s cffi objects.
        dictionary: the frames' dictionary bytes, or None.

    Thread-safe: each thread has its own decompression context; the digested
    dictionary is shared read-only, as libzstd allows.
    """

    def __init__(self, ffi: Any, lib: Any, dictionary: bytes | None) -> None:
        self._ffi, self._lib = ffi, lib
        self._local = threading.local()
        self._ddict = ffi.NULL
        if dictionary is not None:
            self._dictionary = bytes(dictionary)  # kept alive: the digested copy is made now
            ddict = lib.ZSTD_createDDict(self._dictionary, len(self._dictionary))
            self._ddict = _owned(ffi, ddict, lib.ZSTD_freeDDict, "digest the zstd dictionary")

    def _context(self) -> Any:
        dctx = getattr(self._local, "dctx", None)
        if dctx is None:
            made = self._lib.ZSTD_createDCtx()
            what = "create a decompression context"
            dctx = self._local.dctx = _owned(self._ffi, made, self._lib.ZSTD_freeDCtx, what)
        return dctx

    def decode_into(self, source: bytes, out: np.ndarray) -> None:
        """Decodes the frames of ``source``, back to back, into C-contiguous ``out``.

        Raises:
            ValueError: the frames are corrupt or decode to other than ``out.nbytes`` bytes.
        """
        lib = self._lib
        dst = self._ffi.from_buffer(out, require_writable=True)
        got = lib.ZSTD_decompress_usingDDict(
            self._context(), dst, out.nbytes, source, len(source), self._ddict
        )
        if lib.ZSTD_isError(got):
            name = _error_name(self._ffi, lib, got)
            raise ValueError(f"compressed values failed to decode ({name}).")
        if got != out.nbytes:
            raise ValueError(f"compressed values decoded to {got} bytes; expected {out.nbytes}.")


class NativeEncoder:
    """Encodes values as zstd frames with parameters python-zstandard does not expose.

    Args:
        ffi, lib: ``zstandard.backend_cffi``'s cffi objects.
        level: compression level.
        dictionary: the dictionary bytes, or None.
        min_match: zstd's minimum match length (3-7; 0: the level's default).
        raw_literals: store literals as they are instead of Huffman-coding them
            (``ZSTD_c_literalCompressionMode``): slightly larger frames that
            decode faster.

    The frames carry their content size and no dictionary id or checksum, as
    the python-zstandard compressor that
    :class:`~recollect.storage.compression.zstd_codec.ZstdCodec` uses otherwise writes
    them. Thread-safe: one compression context per thread; the digested dictionary is
    shared read-only.
    """

    def __init__(
        self, ffi: Any, lib: Any, level: int, dictionary: bytes | None, min_match: int,
        raw_literals: bool,
    ) -> None:  # fmt: skip
        self._ffi, self._lib = ffi, lib
        self._local = threading.local()
        made = lib.ZSTD_createCCtxParams()
        what = "create compression parameters"
        params = self._params = _owned(ffi, made, lib.ZSTD_freeCCtxParams, what)
        settings = {
            lib.ZSTD_c_compressionLevel: level,
            lib.ZSTD_c_contentSizeFlag: 1,
            lib.ZSTD_c_checksumFlag: 0,
            lib.ZSTD_c_dictIDFlag: 0,
            lib.ZSTD_c_minMatch: min_match,
            lib.ZSTD_c_literalCompressionMode: lib.ZSTD_ps_disable if raw_literals else 0,
        }
        for key, value in settings.items():
            self._check(lib.ZSTD_CCtxParams_setParameter(params, key, value))
        self._cdict = ffi.NULL
        if dictionary is not None:
            self._dictionary = bytes(dictionary)
            cdict = lib.ZSTD_createCDict_advanced2(
                self._dictionary, len(self._dictionary), lib.ZSTD_dlm_byCopy, lib.ZSTD_dct_auto,
                params, lib.ZSTD_defaultCMem,
            )  # fmt: skip
            self._cdict = _owned(ffi, cdict, lib.ZSTD_freeCDict, "digest the zstd dictionary")

    def _check(self, code: int) -> int:
        if self._lib.ZSTD_isError(code):
            name = _error_name(self._ffi, self._lib, code)
            raise ValueError(f"libzstd refused to compress ({name}).")
        return code

    def _context(self) -> Any:
        cctx = getattr(self._local, "cctx", None)
        if cctx is None:
            lib = self._lib
            made = lib.ZSTD_createCCtx()
            cctx = _owned(self._ffi, made, lib.ZSTD_freeCCtx, "create a compression context")
            self._check(lib.ZSTD_CCtx_setParametersUsingCCtxParams(cctx, self._params))
            if self._cdict != self._ffi.NULL:
                self._check(lib.ZSTD_CCtx_refCDict(cctx, self._cdict))
            self._local.cctx = cctx
        return cctx

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        """uint8 ``[n, size]`` (C-contiguous) -> (the n frames back to back, int64 lengths ``[n]``).

        One C call per value (libzstd has no batch call), made by ``map``:
        no bytecode per value, and cffi releases the GIL during each call.
        Each value is compressed into its own slot of a per-thread scratch
        buffer; the frames are then joined.

        Raises:
            ValueError: libzstd reports an error.
        """
        n, size = values.shape
        lib, local = self._lib, self._local
        bound = int(lib.ZSTD_compressBound(size))
        scratch = getattr(local, "scratch", None)
        if scratch is None or scratch[0] != bound or len(scratch[2]) < n:
            scratch = self._scratch(bound, max(n, SCRATCH_VALUES))
            if n <= SCRATCH_VALUES:  # kept for the next add_batch; larger ones are not
                local.scratch = scratch
        _, out, slots, starts = scratch
        src = self._ffi.from_buffer(values)
        calls = map(
            lib.ZSTD_compress2, repeat(self._context(), n), slots[:n], repeat(bound, n),
            map(src.__add__, range(0, n * size, size)), repeat(size, n),
        )  # fmt: skip
        got = np.fromiter(calls, np.uint64, n)
        if n and got.max() > bound:  # libzstd's error codes are the largest size_t values
            self._check(int(got[np.flatnonzero(got > bound)[0]]))
        lengths = got.view(np.int64)
        return b"".join(segments(out, starts[:n], lengths)), lengths

    def _scratch(self, bound: int, n: int) -> tuple[int, np.ndarray, list[Any], np.ndarray]:
        """``n`` output slots of ``bound`` bytes: the array, a pointer per slot, their offsets."""
        out = np.empty(n * bound, np.uint8)
        dst = self._ffi.from_buffer(out, require_writable=True)
        starts = np.arange(n, dtype=np.int64) * bound
        return bound, out, list(map(dst.__add__, starts.tolist())), starts


def _backend() -> Any:
    try:
        from zstandard import backend_cffi
    except Exception:  # no cffi package, or a zstandard build without its cffi backend
        return None
    return backend_cffi


def native_decoder(dictionary: bytes | None) -> NativeDecoder | None:
    """A :class:`NativeDecoder`, or None when python-zstandard's cffi backend is unavailable."""
    backend = _backend()
    return None if backend is None else NativeDecoder(backend.ffi, backend.lib, dictionary)


def native_encoder(
    level: int, dictionary: bytes | None, min_match: int, raw_literals: bool
) -> NativeEncoder | None:
    """A :class:`NativeEncoder`, or None when python-zstandard's cffi backend is unavailable."""
    backend = _backend()
    if backend is None:
        return None
    return NativeEncoder(backend.ffi, backend.lib, level, dictionary, min_match, raw_literals)


def choose_options(
    values: np.ndarray, level: int, dictionary: bytes | None, min_match: int | None,
    raw_literals: bool | None,
) -> tuple[int, bool]:  # fmt: skip
    """``(min_match, raw_literals)`` for values like ``values`` uint8 ``[n, size]``.

    The options given (not None) are kept. Up to ``TUNE_VALUES`` values are
    encoded with each choice (a few ms): ``min_match`` 7 when it makes them
    smaller than the level's default (longer matches, fewer sequences to
    decode: MsPacman frames 16% smaller and 15% faster to decode, Breakout
    frames 11% larger), then raw literals unless they make them more than
    ``RAW_LITERALS_MAX_COST`` larger (2-3% larger and 10-14% faster to decode
    on MsPacman, SpaceInvaders and Seaquest frames). Values under
    ``TUNE_MIN_SIZE`` bytes, or no ``cffi``, get zstd's defaults (0, False)
    where an option is None.
    """
    sample = np.ascontiguousarray(values[:TUNE_VALUES])
    usable = sample.ndim == 2 and len(sample) and sample.shape[1] >= TUNE_MIN_SIZE
    backend = _backend()
    if not usable or backend is None:
        return min_match or 0, bool(raw_literals)

    def size(match: int, raw: bool) -> int:
        encoder = NativeEncoder(backend.ffi, backend.lib, level, dictionary, match, raw)
        return int(encoder.encode(sample)[1].sum())

    matches = [0, 7] if min_match is None else [min_match]
    plain = {m: size(m, bool(raw_literals)) for m in matches}
    match = min(matches, key=lambda m: (plain[m], m))
    if raw_literals is None:
        raw_literals = size(match, True) <= (1 + RAW_LITERALS_MAX_COST) * plain[match]
    return match, raw_literals


class CallerShare:
    """Chunk bounds of a split decode such that the calling thread and the workers end together.

    A worker starts ``wake`` seconds after a split begins (waking a sleeping
    thread: 50-400 us on the 2-core virtual machines measured), and every
    switch of the GIL between threads can cost as much again, so a split has
    one chunk per thread and the caller takes the larger one: with ``v``
    seconds per value, ``n`` values and ``T`` threads it takes
    ``(n + (T - 1) * wake / v) / T`` values, at most ``n - n // (4 T)``. A
    worker that has not started by the time the caller is done leaves its
    chunk to the caller (chunks are claimed, not assigned), so a late worker
    costs no waiting, and the smallest worker share keeps measuring the
    delay. Both times are moving averages of measured splits and
    single-thread decodes.

    Args:
        wake_s: the first guess of a worker's start delay, seconds.
        weight: the weight of each new measurement in the averages.
    """

    def __init__(self, wake_s: float = 100e-6, weight: float = 0.2) -> None:
        self.wake_s, self.value_s, self.weight = wake_s, 0.0, weight

    def bounds(self, n: int, threads: int) -> list[int]:
        """``threads + 1`` chunk bounds over ``range(n)``; the caller's chunk first."""
        ahead = self.wake_s / self.value_s if self.value_s > 0 else 0.0
        caller = min(n - n // (4 * threads), int((n + (threads - 1) * ahead) / threads))
        rest = n - caller
        return [0] + [caller + rest * k // (threads - 1) for k in range(threads)]

    def record_values(self, seconds: float, n: int) -> None:
        """One thread decoded ``n`` values in ``seconds``."""
        if n > 0:
            w = self.weight
            per = seconds / n
            self.value_s = per if self.value_s == 0 else (1 - w) * self.value_s + w * per

    def record_wake(self, seconds: float) -> None:
        """A worker started ``seconds`` after its split began (or had not started by then)."""
        self.wake_s = (1 - self.weight) * self.wake_s + self.weight * seconds
