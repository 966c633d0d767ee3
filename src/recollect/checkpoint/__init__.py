"""Checkpoints: versioned, pickle-free, atomic directories that restore a buffer exactly.

``save_buffer(buffer, path)`` writes ``manifest.json`` (format version, spec,
capacity, counters, sampler state, RNG state, crc32 checksum of every file) and one
``.npy`` per spec leaf holding only the stored steps; ``load_buffer(path)``
restores it, optionally memory-mapped. See :mod:`recollect.checkpoint.format`
for the layout and :mod:`recollect.checkpoint.atomic` for crash safety.
"""

from recollect.checkpoint.format import FORMAT_VERSION
from recollect.checkpoint.reader import load_buffer
from recollect.checkpoint.writer import save_buffer

__all__ = ["FORMAT_VERSION", "load_buffer", "save_buffer"]
