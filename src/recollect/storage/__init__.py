"""Storage backends: preallocated structure-of-arrays, one array per spec leaf."""

from recollect.storage.ring import RingStorage

__all__ = ["RingStorage"]
