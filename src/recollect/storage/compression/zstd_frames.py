"""Vectorized checks of zstd frame layout (RFC 8878), for values restored from a checkpoint.

:func:`check_frames` walks the frames of many values at once with numpy: the
frame header (magic number, descriptor, window, dictionary id and content
size fields), then the block headers (a loop over block ordinals, each step
over every value still being walked; a compressed value of up to 128 KiB is
one block), then the optional checksum. A value passes when it is exactly one
frame whose header states a content size equal to the slot size. It does not
decode anything: a frame that passes can still hold corrupt blocks, which the
batch decode that follows catches (libzstd checks each frame's content size).
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_frames"]

MAGIC = 0xFD2FB528
_DID_BYTES = np.array([0, 1, 2, 4], np.int64)
_FCS_BYTES = np.array([0, 2, 4, 8], np.int64)


def _bytes_at(data: np.ndarray, pos: np.ndarray, count: int) -> np.ndarray:
    """Little-endian uint64 of ``count`` bytes at ``pos`` (positions past the end read 0)."""
    value = np.zeros(len(pos), np.uint64)
    for k in range(count):  # a loop over the bytes of one field, not over values
        at = pos + k
        byte = data[np.minimum(at, len(data) - 1)] if len(data) else np.zeros(len(pos), np.uint8)
        value |= np.where(at < len(data), byte, 0).astype(np.uint64) << np.uint64(8 * k)
    return value


def check_frames(
    data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, size: int
) -> tuple[int, str] | None:
    """The first value that is not exactly one zstd frame of content size ``size``, or None.

    Args:
        data: uint8 ``[total]``: the values' bytes.
        offsets, lengths: int64 ``[n]``: each value's segment of ``data`` (lengths >= 0).
        size: the slot size in bytes every frame must state and decode to.

    Returns:
        None when every value passes, else ``(position in offsets, reason)``.
    """
    offsets, lengths = np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)
    n = len(offsets)
    if not n:
        return None
    ends = offsets + lengths
    reasons = np.zeros(n, np.int8)  # 0: fine so far; else an index into WHY

    def fail(mask: np.ndarray, why: int) -> None:
        reasons[(reasons == 0) & mask] = why

    fail(lengths < 6, 1)
    fail(_bytes_at(data, offsets, 4) != MAGIC, 2)
    fhd = _bytes_at(data, offsets + 4, 1).astype(np.int64)
    fcs_flag, single, reserved = fhd >> 6, (fhd >> 5) & 1, (fhd >> 3) & 1
    checksum, did_flag = (fhd >> 2) & 1, fhd & 3
    fail(reserved != 0, 2)
    fcs_bytes = np.where((fcs_flag == 0) & (single == 1), 1, _FCS_BYTES[fcs_flag])
    fail(fcs_bytes == 0, 3)  # the content size is not stated
    fcs_at = offsets + 5 + (1 - single) + _DID_BYTES[did_flag]
    content = np.zeros(n, np.uint64)
    for width in (1, 2, 4, 8):  # the four field widths
        pick = fcs_bytes == width
        if pick.any():
            value = _bytes_at(data, fcs_at[pick], width)
            content[pick] = value + np.uint64(256) if width == 2 else value
    stated = content.astype(np.float64)  # for the message only
    fail(content != np.uint64(size), 4)
    pos = fcs_at + fcs_bytes
    walking = reasons == 0
    while walking.any():  # one step per block ordinal, over every value still walking
        fail(walking & (pos + 3 > ends), 5)
        walking &= reasons == 0
        at = pos[walking]
        header = _bytes_at(data, at, 3).astype(np.int64)
        last, kind, block = header & 1, (header >> 1) & 3, header >> 3
        step = 3 + np.where(kind == 1, 1, block)
        bad = np.zeros(n, bool)
        bad[walking] = kind == 3
        fail(bad, 2)
        pos[walking] = at + step
        done = np.zeros(n, bool)
        done[walking] = last == 1
        walking &= ~done & (reasons == 0)
        fail(walking & (pos > ends), 5)
        walking &= reasons == 0
    end = pos + 4 * checksum
    fail(end > ends, 5)
    fail(end < ends, 6)
    bad = np.flatnonzero(reasons)
    if not len(bad):
        return None
    j = int(bad[0])
    why = {
        1: f"is {int(lengths[j])} bytes, shorter than any zstd frame",
        2: "is not a valid zstd frame (bad magic number, reserved bit or block type)",
        3: "is a zstd frame that does not state its content size",
        4: f"is a zstd frame of content size {stated[j]:.0f} bytes; the slot holds {size}",
        5: "is a zstd frame cut short (truncated)",
        6: "holds bytes after its zstd frame (a second frame or garbage)",
    }[int(reasons[j])]
    return j, why
