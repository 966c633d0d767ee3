"""Storage whose chosen plain leaves keep each step's value compressed.

Wraps an inner storage (:class:`~recollect.storage.ring.RingStorage` or
:class:`~recollect.storage.frames.frame_store.FrameStackStorage`) in which the
compressed leaves are zero-size placeholders; their values live in
:class:`~recollect.storage.compression.compressed.CompressedSlots` (one per leaf, slot
``(row, time % max_length)``). Frame-stacked leaves are compressed by the
frame store itself (each frame once), not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from recollect.errors import CheckpointError
from recollect.specs import ArraySpec, FlatSpec
from recollect.storage.compression.codecs import Codec
from recollect.storage.compression.compressed import CompressedSlots
from recollect.storage.frames.frame_store import FrameStackStorage

__all__ = ["CompressedStorage"]


class CompressedStorage:
    """Implements :class:`~recollect.storage.base.Storage`; leaves in ``codecs`` compressed.

    Args:
        flat_spec: the flattened spec.
        num_envs, max_length: the ring geometry.
        codecs: ``{leaf index: Codec}`` of the plain (not frame-stacked) leaves to compress.
        inner: ``(placeholder FlatSpec) -> Storage`` building the storage of every other leaf.
        make_slots: ``(codec, num_envs, slots, shape, dtype, name)`` building each leaf's
            store (:class:`CompressedSlots` in RAM; ``DiskSlots`` on memmap storage).
    """

    def __init__(
        self,
        flat_spec: FlatSpec,
        num_envs: int,
        max_length: int,
        codecs: dict[int, Codec],
        inner: Callable[[FlatSpec], Any],
        make_slots: Callable[..., CompressedSlots] = CompressedSlots,
    ) -> None:
        self.flat_spec, self.num_envs, self.max_length = flat_spec, num_envs, max_length
        self._on_disk = make_slots is not CompressedSlots
        self._slots = {
            i: make_slots(
                c, num_envs, max_length, flat_spec.shapes[i], flat_spec.dtypes[i], f"leaf_{i}"
            )
            for i, c in sorted(codecs.items())
        }
        placeholder = [
            ArraySpec((0,), d) if i in codecs else ArraySpec(s, d)
            for i, (s, d) in enumerate(zip(flat_spec.shapes, flat_spec.dtypes, strict=True))
        ]
        self.inner = inner(FlatSpec(placeholder))

    @property
    def compressed_slots(self) -> dict[int, CompressedSlots]:
        """``{leaf index: CompressedSlots}`` of the compressed plain leaves."""
        return dict(self._slots)

    @property
    def nbytes(self) -> int:
        """Bytes held: the inner storage plus each compressed leaf's arena blocks and index."""
        return self.inner.nbytes + sum(s.nbytes for s in self._slots.values())

    def prepare(self, leaves: Sequence[Any]) -> list[Any]:
        """Compresses the compressed leaves of one write (call it outside the table lock)."""
        out = list(leaves)
        if isinstance(self.inner, FrameStackStorage):
            out = self.inner.prepare(out)
        for i, slots in self._slots.items():
            out[i] = slots.encode(leaves[i])
        return out

    def write(
        self, rows: np.ndarray | None, slots: Any, leaves: Sequence[Any], *, times: Any = None
    ) -> None:
        """Writes one step per row (or a block ``slots`` ``[k, T]``), see the Storage protocol."""
        if self._on_disk:  # compress (if not yet) and grow every block file before writing
            leaves = self.prepare(leaves)
            for i, store in self._slots.items():
                store.reserve(leaves[i])
            if isinstance(self.inner, FrameStackStorage):
                self.inner.reserve(leaves)
        plain = list(leaves)
        block = np.ndim(slots) == 2
        where = rows
        if block:  # slots [k, T]: rows as a column
            where = (np.arange(self.num_envs) if rows is None else rows)[:, None]
        shape = np.shape(slots) if block else (self.num_envs if rows is None else len(rows),)
        for i, store in self._slots.items():
            store.store(where, slots, leaves[i])
            plain[i] = np.empty((*shape, 0), self.flat_spec.dtypes[i])
        self.inner.write(rows, slots, plain, times=times)

    def gather(
        self,
        rows: np.ndarray,
        slots: np.ndarray,
        *,
        times: np.ndarray | None = None,
        leaf_ids: Sequence[int] | None = None,
    ) -> list[np.ndarray]:
        """Leaves at ``(rows, slots)``; compressed ones decoded (each distinct value once)."""
        out = self.inner.gather(rows, slots, times=times, leaf_ids=leaf_ids)
        ids = range(len(out)) if leaf_ids is None else leaf_ids
        for pos, i in enumerate(ids):
            if i in self._slots:
                out[pos] = self._slots[i].load(rows, slots)
        return out

    def flush(self) -> None:
        """Writes dirty pages of the inner storage's and the compressed leaves' files to
        disk (a no-op in RAM)."""
        flush = getattr(self.inner, "flush", None)  # a RAM ring has none
        if flush is not None:
            flush()
        for store in self._slots.values():
            store.flush()

    def state_dict(self) -> dict[str, Any]:
        """The inner storage's state plus ``compressed_leaves`` ``{leaf_i: slots state}``."""
        state = dict(self.inner.state_dict())
        state["compressed_leaves"] = {f"leaf_{i}": s.state_dict() for i, s in self._slots.items()}
        return state

    def check_stored(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Raises CheckpointError when a stored step's compressed value was never written
        (:meth:`~recollect.storage.compression.compressed.CompressedSlots.check_written`)."""
        for slots in self._slots.values():
            slots.check_written(lo, hi)
        self.inner.check_stored(lo, hi)

    def load_state_dict(self, state: dict[str, Any], *, allow_map: bool = False) -> None:
        """Restores :meth:`state_dict` output.

        Raises:
            CheckpointError: compressed leaves missing, extra or damaged.
        """
        saved = state.get("compressed_leaves", {})
        names = sorted(f"leaf_{i}" for i in self._slots)
        if sorted(saved) != names:
            raise CheckpointError(
                f"saved compressed leaves {sorted(saved)}; this buffer has {names}."
            )
        inner = {k: v for k, v in state.items() if k != "compressed_leaves"}
        self.inner.load_state_dict(inner, allow_map=allow_map)
        for i, slots in self._slots.items():
            slots.load_state_dict(saved[f"leaf_{i}"], f"leaf_{i}")
