"""Compressed slots: one leaf's values, each compressed once, in a block arena.

:class:`CompressedSlots` keeps ``num_envs`` rows of ``slots`` values of one
shape and dtype. Each value is compressed on its own (so any value can be read
back alone) and its bytes are appended to a :class:`~recollect.storage.arena.ByteArena`;
two arrays ``offsets`` int64 and ``lengths`` int32 ``[num_envs, slots]`` index
them (-1 / 0 for a slot never written). Reads decode each distinct value of a
batch once, in one codec call (zstd: threads in C, outside the GIL), then
index the decoded values into the output. Writes may compress first, outside
any lock (:meth:`CompressedSlots.encode` returns an :class:`Encoded`), and
store later (:meth:`CompressedSlots.store`).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.storage.arena import ByteArena
from recollect.storage.codecs import Codec

__all__ = ["CompressedSlots", "Encoded", "block_bytes", "slots_nbytes"]

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


class Encoded:
    """Values already compressed: their bytes joined and int64 ``lengths`` ``[*lead]``."""

    __slots__ = ("data", "lengths")

    def __init__(self, data: bytes, lengths: np.ndarray) -> None:
        self.data, self.lengths = data, lengths

    @property
    def shape(self) -> tuple[int, ...]:
        """The leading (env, time) dims of the values: ``lengths.shape``."""
        return self.lengths.shape


class CompressedSlots:
    """One leaf's values ``[num_envs, slots, *shape]``, each stored compressed.

    Args:
        codec: the :class:`~recollect.storage.codecs.Codec`.
        num_envs, slots: the index geometry.
        shape, dtype: one value's shape and dtype.
    """

    def __init__(
        self, codec: Codec, num_envs: int, slots: int, shape: tuple[int, ...], dtype: Any
    ) -> None:
        self.codec, self.shape, self.dtype = codec, tuple(shape), np.dtype(dtype)
        self.num_envs, self.slots = num_envs, slots
        self.size = math.prod(self.shape) * self.dtype.itemsize
        self.offsets = np.full((num_envs, slots), -1, np.int64)
        self.lengths = np.zeros((num_envs, slots), np.int32)
        bound = codec.bound(max(1, self.size))
        block = block_bytes(codec, self.size)
        # the worst case (incompressible values) fits without growing; only touched pages count
        self.arena = ByteArena(num_envs * slots * bound + (num_envs + 2) * block, block)
        self._all_rows = np.arange(num_envs, dtype=np.int64)
        self._scratch = threading.local()  # decoded values of the last read, per thread

    @property
    def nbytes(self) -> int:
        """Bytes held: arena blocks handed out plus the offset/length index."""
        return self.arena.nbytes + self.offsets.nbytes + self.lengths.nbytes

    @property
    def stored_bytes(self) -> int:
        """Compressed bytes of the values stored now."""
        return int(self.lengths.sum())

    def encode(self, values: Any) -> Encoded:
        """Compresses ``values`` ``[*lead, *shape]`` (the leaf's dtype) one value at a time."""
        if isinstance(values, Encoded):
            return values
        values = np.ascontiguousarray(values, self.dtype)
        lead = values.shape[: values.ndim - len(self.shape)]
        raw = values.reshape(-1).view(np.uint8).reshape(-1, self.size)
        data, lengths = self.codec.encode(raw)
        return Encoded(data, lengths.reshape(lead))

    def store(self, rows: np.ndarray | None, slots: Any, values: Any) -> None:
        """Stores values (array or :class:`Encoded`) at ``(rows, slots)`` (broadcasting).

        ``rows`` None means every row. A block write has ``rows`` ``[k, 1]`` and
        ``slots`` ``[k, T]``.
        """
        encoded = self.encode(values)
        lengths = encoded.lengths.reshape(-1)
        if rows is None and np.ndim(slots) == 0:  # every row at one slot: column views
            column = self.offsets[:, int(slots)]
            self.arena.release(column)
            column[:] = self.arena.append(encoded.data, lengths)
            self.lengths[:, int(slots)] = lengths
            return
        rows = self._all_rows if rows is None else rows
        rows, slots = np.broadcast_arrays(rows, np.asarray(slots))
        self.arena.release(self.offsets[rows, slots].reshape(-1))
        offsets = self.arena.append(encoded.data, lengths)
        self.offsets[rows, slots] = offsets.reshape(rows.shape)
        self.lengths[rows, slots] = lengths.reshape(rows.shape)

    def decode_keys(self, keys: np.ndarray) -> np.ndarray:
        """Values ``[*keys.shape, *shape]`` at keys ``row * slots + slot``, each decoded once."""
        unique, inverse = np.unique(keys, return_inverse=True)
        table = self.decode_unique(unique)
        return table[inverse.reshape(-1)].reshape(*keys.shape, *self.shape)

    def decode_unique(self, keys: np.ndarray, lead: int = 0) -> np.ndarray:
        """Values at distinct flat keys, zeros where never written, in a per-thread scratch
        array ``[lead + len(keys), *shape]`` (rows ``[:lead]`` left for the caller).

        The scratch array is reused by this thread's next call: copy what you keep.
        """
        n = lead + len(keys)
        scratch = getattr(self._scratch, "array", None)
        if scratch is None or len(scratch) < n:
            scratch = self._scratch.array = np.empty((max(n, 64), self.size), np.uint8)
        raw = scratch[lead:n]
        offsets = self.offsets.reshape(-1)[keys]
        lengths = self.lengths.reshape(-1)[keys]
        written = offsets >= 0
        if written.all():
            self._decode(offsets, lengths, raw)
        else:
            raw[~written] = 0
            part = np.empty((int(written.sum()), self.size), np.uint8)
            self._decode(offsets[written], lengths[written], part)
            raw[written] = part
        return scratch[:n].view(self.dtype).reshape(n, *self.shape)

    def _decode(self, offsets: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        """``codec.decode_into``; a value that fails to decode comes back as zeros.

        Under the table lock every stored value decodes. A gather outside the
        lock (``Table.is_stale`` protocol) can read a slot while a write
        replaces it; that draw is stale and is drawn again, so its values only
        need to not raise. The fallback decodes value by value (rare path).
        """
        try:
            self.codec.decode_into(self.arena.data, offsets, lengths, out)
        except Exception:
            for j in range(len(offsets)):  # fallback only: one value at a time
                try:
                    self.codec.decode_into(
                        self.arena.data, offsets[j : j + 1], lengths[j : j + 1], out[j : j + 1]
                    )
                except Exception:
                    out[j] = 0

    def load(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Values ``[*shape_of(rows, slots), *shape]`` at ``(rows, slots)`` (broadcasting)."""
        return self.decode_keys(np.asarray(rows) * self.slots + np.asarray(slots))

    def clear(self) -> None:
        """Forgets every value."""
        self.offsets[:] = -1
        self.lengths[:] = 0
        self.arena.clear()

    # -- state ----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"bytes": uint8 [total], "lengths": int32 [num_envs, slots], "codec": name}``.

        ``bytes`` holds the stored values' compressed bytes back to back in slot
        order (row-major), without the arena's free space.
        """
        flat_off, flat_len = self.offsets.reshape(-1), self.lengths.reshape(-1).astype(np.int64)
        keep = np.flatnonzero(flat_off >= 0)
        ends = flat_off[keep] + flat_len[keep]
        view = self.arena.data.data  # a memoryview; one join of the segments: no index per byte
        joined = b"".join(map(view.__getitem__, map(slice, flat_off[keep].tolist(), ends.tolist())))
        data = np.frombuffer(joined, np.uint8)
        lengths = np.where(self.offsets >= 0, self.lengths, -1).astype(np.int32)
        return {"bytes": data, "lengths": lengths, "codec": self.codec.name}

    def load_state_dict(self, state: Any, name: str) -> None:
        """Restores :meth:`state_dict` output (bytes copied into fresh blocks).

        Raises:
            CheckpointError: missing entries, another shape, codec or byte count.
        """
        if not isinstance(state, dict) or {"bytes", "lengths"} - set(state):
            raise CheckpointError(f"saved compressed {name} lacks its bytes or lengths.")
        if state.get("codec", self.codec.name) != self.codec.name:
            raise CheckpointError(
                f"saved compressed {name} uses codec {state.get('codec')!r}; this buffer "
                f"uses {self.codec.name!r}."
            )
        data, lengths = np.asarray(state["bytes"]), np.asarray(state["lengths"])
        if lengths.shape != self.offsets.shape or data.dtype != np.uint8 or data.ndim != 1:
            raise CheckpointError(
                f"saved compressed {name} has lengths of shape {lengths.shape} and bytes of "
                f"dtype {data.dtype}; this buffer needs shape {self.offsets.shape}, uint8."
            )
        written = lengths >= 0
        if int(lengths[written].astype(np.int64).sum()) != len(data):
            raise CheckpointError(f"saved compressed {name}: lengths do not add up to its bytes.")
        self.clear()
        offsets = self.arena.append(data, lengths[written].astype(np.int64))
        self.offsets[written] = offsets
        self.lengths[written] = lengths[written]
