"""Codecs for compressed leaves: zstd (default,
:mod:`recollect.storage.compression.zstd_codec`), lz4 and zlib (always available).

A codec turns ``n`` equal-sized values (rows of a uint8 array ``[n, size]``)
into one contiguous byte string plus ``n`` lengths, and decodes segments
``(offset, length)`` of a large byte array back into a ``[n, size]`` array.
Chosen by measurement on real ALE frames (``benchmarks/bench_memory.py``):
zstd with a trained dictionary keeps an 84x84 frame in 95 (Pong) to 370
(MsPacman) bytes and decodes it in 2-3.5 us; lz4 is 2-4x larger and no
faster to decode then; zlib level 1 is larger and slower both ways. lz4 and
zlib release the GIL per value.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

import numpy as np

from recollect.arguments import check_int
from recollect.errors import InvalidArgumentError
from recollect.storage.compression.codec_base import (
    Codec,
    DictionaryCodec,
    check_size,
    join,
    segments,
)
from recollect.storage.compression.zstd_codec import ZstdCodec

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
        level = check_int("level", level, minimum=0, maximum=12, show_name=False, owner="lz4")
        self.level = level
        self._block = lz4.block
        mode = "high_compression" if level else "default"
        self._kwargs = {"mode": mode, "compression": level, "store_size": False}

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        return join(list(map(functools.partial(self._block.compress, **self._kwargs), values)))

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        size = out.shape[1] if out.ndim == 2 else out.nbytes
        decode = functools.partial(self._block.decompress, uncompressed_size=size)
        joined = b"".join(map(decode, segments(data, offsets, lengths)))
        check_size(len(joined), out.nbytes)
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
        self.level = check_int("level", level, minimum=0, maximum=9, show_name=False, owner="zlib")

    def encode(self, values: np.ndarray) -> tuple[bytes, np.ndarray]:
        return join(list(map(functools.partial(zlib.compress, level=self.level), values)))

    def decode_into(
        self, data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray
    ) -> None:
        joined = b"".join(map(zlib.decompress, segments(data, offsets, lengths)))
        check_size(len(joined), out.nbytes)
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
OPTIONS = {
    "zstd": ("dictionary_size_bytes", "train_values", "min_match", "raw_literals"),
    "lz4": (),
    "zlib": (),
}


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
                "or a codec object such as recollect.storage.compression.codecs.ZstdCodec(level=3)."
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
