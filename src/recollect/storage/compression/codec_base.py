"""What a compressed leaf needs from a codec (:class:`Codec`, :class:`DictionaryCodec`)
and the helpers the codecs share."""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Codec", "DictionaryCodec"]


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
        """A dictionary for values like ``values`` uint8 ``[n, size]``, or None (cannot train)."""

    def with_dictionary(self, dictionary: bytes) -> Codec:
        """A codec that encodes and decodes with ``dictionary``."""


def usable_threads() -> int:
    """Usable CPUs, at most 4: the default number of threads of one batch."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def bounds(n: int, chunks: int) -> list[int]:
    """Bounds of ``chunks`` near-equal chunks of ``range(n)`` (fewer when ``n`` is small)."""
    chunks = max(1, min(chunks, n))
    return [n * k // chunks for k in range(chunks + 1)]


def join(parts: list[bytes]) -> tuple[bytes, np.ndarray]:
    """Encoded values -> (their bytes joined, int64 lengths)."""
    return b"".join(parts), np.fromiter(map(len, parts), np.int64, len(parts))


def segments(data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> Any:
    """Memoryviews of the segments (``map`` of C functions: no bytecode per segment)."""
    ends = offsets + lengths
    view = data.data  # a memoryview of the array's bytes
    return map(view.__getitem__, map(slice, offsets.tolist(), ends.tolist()))


def check_size(got: int, want: int) -> None:
    """Raises ValueError unless a batch decoded to the bytes it should."""
    if got != want:
        raise ValueError(f"compressed values decoded to {got} bytes; expected {want}.")
