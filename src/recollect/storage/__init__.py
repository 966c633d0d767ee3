"""Storage backends: preallocated structure-of-arrays, one array per spec leaf."""

from recollect.storage.base import ColumnSource, Storage
from recollect.storage.compression.codecs import Codec, Lz4Codec, ZlibCodec, ZstdCodec
from recollect.storage.frames.frame_store import FrameStack, FrameStackStorage
from recollect.storage.gather import Gatherer
from recollect.storage.memmap import MemmapStorage
from recollect.storage.ring import RingStorage

__all__ = [
    "Codec",
    "ColumnSource",
    "FrameStack",
    "FrameStackStorage",
    "Gatherer",
    "Lz4Codec",
    "MemmapStorage",
    "RingStorage",
    "Storage",
    "ZlibCodec",
    "ZstdCodec",
]
