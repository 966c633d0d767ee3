"""A frame ring whose frames are stored compressed (each frame once).

Same interface as :class:`~recollect.storage.frames.frame_layout.FrameRing` in its
rows layout: ``frames[row, time % ring]`` is one frame, here a compressed
value of :class:`~recollect.storage.compression.compressed.CompressedSlots`. A gather of
stacks decodes every distinct frame of the batch once (a window of 2 steps of
4-frame stacks needs 5 frames, not 8) and indexes them into the stacks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recollect.storage.compression.codecs import Codec
from recollect.storage.compression.compressed import CompressedSlots, Encoded
from recollect.storage.frames.frame_layout import lane_word
from recollect.storage.gather import Gatherer

__all__ = ["CompressedFrameRing"]


class CompressedFrameRing:
    """One frame-stacked leaf's frames for ``num_envs`` rows of ``ring`` times, compressed.

    Args:
        shape: the leaf's per-step (stacked) shape; ``axis`` its stack axis.
        dtype: the leaf dtype.
        num_envs, ring: rows and frames per row.
        pad: the padding frame ``[*frame_shape]``.
        codec: the codec of every frame.
        gatherer: copies decoded frames into the (recycled) output blocks.
        name: the leaf's name in messages (``frames_3``: its checkpoint key).
        make_slots: ``(codec, num_envs, slots, shape, dtype, name)`` building the
            store (:class:`CompressedSlots` in RAM, ``DiskSlots`` for memmap storage).
    """

    lanes = False

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: Any,
        axis: int,
        num_envs: int,
        ring: int,
        pad: np.ndarray,
        codec: Codec,
        gatherer: Gatherer | None = None,
        name: str = "frames",
        make_slots: Any = CompressedSlots,
    ) -> None:
        self.k, self.axis, self.ring, self.num_envs = shape[axis], axis, ring, num_envs
        self.shape, self.frame_shape, self.dtype = shape, pad.shape, np.dtype(dtype)
        self.pad = pad
        self._word = lane_word(shape, self.dtype, axis)  # the newest frame is the top lane
        self.gatherer = gatherer if gatherer is not None else Gatherer()
        self.slots = make_slots(codec, num_envs, ring, pad.shape, dtype, name)

    @property
    def nbytes(self) -> int:
        """Bytes held (arena blocks and index)."""
        return self.slots.nbytes

    def newest(self, stacked: np.ndarray) -> np.ndarray:
        """The newest frame ``[k, *frame_shape]`` of each stack ``[k, *shape]``.

        Stacks that fit a machine word along a last stack axis (uint8
        ``[84, 84, 4]``) give it with one word shift (about 5x faster than a
        byte-strided ``np.take``).
        """
        word = self._word
        if word is None or stacked.dtype != self.dtype or not stacked.flags.c_contiguous:
            return np.take(stacked, self.k - 1, axis=1 + self.axis)
        words = stacked.view(word)[..., 0]
        top = np.empty(words.shape, f"u{self.dtype.itemsize}")  # shift and narrow in one pass
        shift = word.type((self.k - 1) * 8 * self.dtype.itemsize)
        np.right_shift(words, shift, out=top, casting="unsafe")
        return top.view(self.dtype)

    def encode_stacked(self, stacked: Any) -> Encoded:
        """Compresses the newest frame of each stack (call it outside the table lock)."""
        if isinstance(stacked, Encoded):
            return stacked
        return self.slots.encode(self.newest(np.asarray(stacked)))

    def write_stacked(self, rows: np.ndarray | None, times: Any, stacked: Any) -> None:
        """Stores the newest frame of each stack (or an :meth:`encode_stacked` result)."""
        self.slots.store(rows, np.asarray(times) % self.ring, self.encode_stacked(stacked))

    def write(self, rows: np.ndarray | None, times: Any, newest: np.ndarray) -> None:
        """Stores ``newest`` ``[k, *frame_shape]`` as the frames of ``(rows, times)``."""
        self.slots.store(rows, np.asarray(times) % self.ring, newest)

    def take(self, rows: np.ndarray, times: np.ndarray, pad: np.ndarray | None) -> np.ndarray:
        """Frames ``[*shape, *frame_shape]`` at ``(rows, times)``; padding where ``pad``."""
        keys = np.asarray(rows) * self.ring + np.asarray(times) % self.ring
        if pad is not None:
            keys = np.where(pad, -1, keys)  # -1 sorts first: the padding frame's row
        unique, inverse = np.unique(keys, return_inverse=True)
        lead = int(len(unique) > 0 and unique[0] < 0)
        table = self.slots.decode_unique(unique[lead:], lead)  # row 0: padding, if used
        if lead:
            table[0] = self.pad
        flat = table.reshape(len(table), math.prod(self.frame_shape))  # rows: one frame each
        out = self.gatherer.gather([flat], inverse.reshape(keys.shape))[0]
        return out.reshape(*keys.shape, *self.frame_shape)

    def clear(self) -> None:
        """Forgets every frame."""
        self.slots.clear()
