"""Decompressing Snappy's raw block format (what Reverb compresses chunk tensors with).

A block is a varint of the uncompressed length followed by elements, each starting with a
tag byte whose two low bits say what follows:

- ``0`` literal: length-1 in the tag's upper six bits (60..63: in the next 1..4 bytes,
  little-endian), then that many bytes;
- ``1`` copy: length ``4 + ((tag >> 2) & 7)``, offset ``(tag >> 5) << 8 | next byte``;
- ``2`` copy: length ``1 + (tag >> 2)``, offset in the next 2 bytes (little-endian);
- ``3`` copy: length ``1 + (tag >> 2)``, offset in the next 4 bytes.

A copy repeats ``length`` bytes starting ``offset`` bytes back in the output (the ranges
may overlap: offset 1, length 8 repeats one byte eight times).
"""

from __future__ import annotations

__all__ = ["SnappyError", "read_varint", "uncompress"]


class SnappyError(ValueError):
    """The bytes are not a valid Snappy block (the message says where and why)."""


def read_varint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int] | None:
    """The base-128 varint (low 7 bits first) at ``data[pos]`` and the position after it;
    None when ``data`` ends first or it is longer than ``max_bytes`` bytes."""
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 7 * (max_bytes - 1):
            return None
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def uncompress(data: bytes, expected_size: int | None = None) -> bytes:
    """The bytes a Snappy block holds.

    Args:
        data: one raw Snappy block (no framing format).
        expected_size: when given, the uncompressed size the caller expects.

    Returns:
        The uncompressed bytes.

    Raises:
        SnappyError: the block is truncated, refers to bytes before its start, holds more
            or fewer bytes than its length prefix says, or than ``expected_size``.
    """
    prefix = read_varint(data, 0, 6)
    if prefix is None:
        raise SnappyError("the block's length prefix is truncated or too long")
    size, pos = prefix
    if expected_size is not None and size != expected_size:
        raise SnappyError(f"the block holds {size} bytes, {expected_size} were expected")
    out = bytearray(size)
    at, end = 0, len(data)
    while pos < end:
        tag = data[pos]
        kind = tag & 3
        if kind == 2:  # the most common element of compressible data: checked first
            if pos + 3 > end:
                raise SnappyError(f"a copy's offset is truncated at byte {pos + 1}")
            length = (tag >> 2) + 1
            offset = data[pos + 1] | (data[pos + 2] << 8)
            pos += 3
        elif kind == 0:
            pos += 1
            length = (tag >> 2) + 1
            if length > 60:
                extra = length - 60
                if pos + extra > end:
                    raise SnappyError(f"a literal's length is truncated at byte {pos}")
                length = int.from_bytes(data[pos : pos + extra], "little") + 1
                pos += extra
            if pos + length > end or at + length > size:
                raise SnappyError(f"a literal of {length} bytes at byte {pos} overruns the block")
            out[at : at + length] = data[pos : pos + length]
            pos += length
            at += length
            continue
        elif kind == 1:
            if pos + 2 > end:
                raise SnappyError(f"a copy's offset is truncated at byte {pos + 1}")
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | data[pos + 1]
            pos += 2
        else:
            if pos + 5 > end:
                raise SnappyError(f"a copy's offset is truncated at byte {pos + 1}")
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[pos + 1 : pos + 5], "little")
            pos += 5
        if offset == 0 or offset > at or at + length > size:
            raise SnappyError(
                f"a copy of {length} bytes from {offset} back at output byte {at} is out of range"
            )
        src = at - offset
        if offset >= length:
            out[at : at + length] = out[src : src + length]
        else:  # overlapping: the last `offset` bytes repeat
            out[at : at + length] = (out[src:at] * (length // offset + 1))[:length]
        at += length
    if at != size:
        raise SnappyError(f"the block holds {at} bytes, its header says {size}")
    return bytes(out)
