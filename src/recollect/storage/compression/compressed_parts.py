"""Small parts of compressed slots (:mod:`~recollect.storage.compression.compressed`): already
encoded values, arena sizes, encoder tuning and handing freed heap back to the OS."""

from __future__ import annotations

import ctypes

import numpy as np

from recollect.storage.compression.codecs import Codec

__all__ = ["BLOCK_BYTES", "Encoded", "block_bytes", "slots_nbytes", "trim_heap", "tuned"]

BLOCK_BYTES = 1 << 20


def block_bytes(codec: Codec, size: int) -> int:
    """Arena block size for values of ``size`` bytes (at least 4 worst-case values)."""
    return max(BLOCK_BYTES, 4 * codec.bound(max(1, size)))


def slots_nbytes(codec: Codec, values: int, size: int, mean_bytes: float | None = None) -> int:
    """Bytes of :class:`CompressedSlots` holding ``values`` slots of ``size`` bytes.

    Without ``mean_bytes``: what an empty store holds (index and first block).
    With it (measured mean compressed length): a full store, its bytes rounded
    up to whole blocks plus one block being written.
    """
    block = -(-block_bytes(codec, size) // 4096) * 4096
    index = values * (8 + 4)
    if mean_bytes is None:
        return index + block
    return index + (-(-int(values * mean_bytes) // block) + 1) * block


def trim_heap() -> None:
    """Hands freed heap memory back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    glibc keeps freed chunks below its dynamic trim threshold (tens of MB once
    numpy has freed large arrays), so the temporaries of a dictionary training
    would otherwise stay in the process's RSS for good.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc (or no CDLL(None): Windows)
        return
    trim(0)


class Encoded:
    """Values already compressed: their bytes joined, int64 ``lengths`` ``[*lead]``, and
    the codec that encoded them (a store re-encodes them if it has changed since)."""

    __slots__ = ("codec", "data", "lengths")

    def __init__(self, data: bytes, lengths: np.ndarray, codec: Codec) -> None:
        self.data, self.lengths, self.codec = data, lengths, codec

    @property
    def shape(self) -> tuple[int, ...]:
        """The leading (env, time) dims of the values: ``lengths.shape``."""
        return self.lengths.shape


def tuned(codec: Codec, values: np.ndarray) -> Codec:
    """``codec.tuned(values)`` for a codec that chooses encoder options on sample values
    (:meth:`~recollect.storage.compression.zstd_codec.ZstdCodec.tuned`); any other codec as
    it is."""
    tune = getattr(codec, "tuned", None)
    return codec if tune is None else tune(values)
