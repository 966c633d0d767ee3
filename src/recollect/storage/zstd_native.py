"""Batch decoding of zstd frames in one C call per chunk, the GIL released for all of it.

python-zstandard's C backend decodes a stream of frames but takes the GIL
back after every frame, so two threads decoding 84x84 frames (2-4 us each)
pass the GIL back and forth instead of running side by side. Its cffi
backend exposes libzstd itself (``zstandard.backend_cffi.lib``, needs the
``cffi`` package): ``ZSTD_decompress_usingDDict`` decodes concatenated
frames into one contiguous output, and cffi releases the GIL for the whole
call. Measured on real ALE frames (MsPacman, 370 B per frame, 2 cores):
1,280 frames 4.4 ms on one thread, 2.5 ms split over two.

:func:`native_decoder` returns None when the cffi backend cannot be
imported; :class:`~recollect.storage.zstd_codec.ZstdCodec` then decodes
through python-zstandard's stream reader (same results, slower).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["CallerShare", "NativeDecoder", "native_decoder"]


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
            if ddict == ffi.NULL:
                raise MemoryError("libzstd could not digest the zstd dictionary.")
            self._ddict = ffi.gc(ddict, lib.ZSTD_freeDDict)

    def _context(self) -> Any:
        dctx = getattr(self._local, "dctx", None)
        if dctx is None:
            made = self._lib.ZSTD_createDCtx()
            if made == self._ffi.NULL:
                raise MemoryError("libzstd could not create a decompression context.")
            dctx = self._local.dctx = self._ffi.gc(made, self._lib.ZSTD_freeDCtx)
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
            name = self._ffi.string(lib.ZSTD_getErrorName(got)).decode()
            raise ValueError(f"compressed values failed to decode ({name}).")
        if got != out.nbytes:
            raise ValueError(f"compressed values decoded to {got} bytes; expected {out.nbytes}.")


def native_decoder(dictionary: bytes | None) -> NativeDecoder | None:
    """A :class:`NativeDecoder`, or None when python-zstandard's cffi backend is unavailable."""
    try:
        from zstandard import backend_cffi
    except Exception:  # no cffi package, or a zstandard build without its cffi backend
        return None
    return NativeDecoder(backend_cffi.ffi, backend_cffi.lib, dictionary)


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
