"""The codecs under the Reverb checkpoint reader, each beside a slow reference."""

from __future__ import annotations

import gzip
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recollect.errors import CheckpointError
from recollect.state.reverb.chunks import (
    TensorDecodeError,
    decode_chunk_tensor,
    decode_tensor_proto,
    delta_decode,
)
from recollect.state.reverb.protos import messages
from recollect.state.reverb.snappy import SnappyError, uncompress
from recollect.state.reverb.tfrecord import crc32c, crc32c_many, masked_crc32c, read_records


def crc32c_reference(data: bytes) -> int:
    """Bit-at-a-time CRC-32C (RFC 3720), no tables."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_values():
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720's check value
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=0, max_size=300), st.integers(0, 70_000), st.integers(0, 2**32 - 1))
def test_crc32c_lanes_match_the_reference(head, size, seed):
    """Sizes above 4096 take the numpy lane path; compare both paths with the reference."""
    rng = np.random.default_rng(seed)
    data = head + rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    assert crc32c(data) == crc32c_reference(data)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30), st.sampled_from([0, 1, 65536, 70_001]))
def test_crc32c_many_matches_the_reference(chunks, big):
    """Batched over records of mixed lengths (zero-padded lanes), large ones on their own."""
    chunks = [*chunks, bytes(range(256)) * (big // 256) + b"x" * (big % 256)]
    assert crc32c_many(chunks).tolist() == [crc32c_reference(c) for c in chunks]


def frame(records: list[bytes]) -> bytes:
    out = bytearray()
    for record in records:
        head = len(record).to_bytes(8, "little")
        out += head + masked_crc32c(head).to_bytes(4, "little")
        out += record + masked_crc32c(record).to_bytes(4, "little")
    return bytes(out)


@pytest.mark.parametrize("compress", [lambda b: b, zlib.compress, gzip.compress])
def test_read_records_plain_zlib_gzip(tmp_path, compress):
    records = [b"", b"a", bytes(range(256)) * 30]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(compress(frame(records)))
    assert read_records(path) == records


def test_read_records_length_crc(tmp_path):
    raw = bytearray(frame([b"hello", b"world"]))
    raw[17 + 8] ^= 1  # record 1's length field (record 0 takes 12 + 5 + 4 = 21 bytes)
    raw[17 + 8] ^= 1
    raw[21] ^= 1
    path = tmp_path / "f.tfrecord"
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"f.tfrecord: record 1 at byte 21 .*length's CRC"):
        read_records(path)


def test_read_records_unreadable(tmp_path):
    with pytest.raises(CheckpointError, match=r"absent.tfrecord: cannot read the TFRecord file"):
        read_records(tmp_path / "absent.tfrecord")


def test_read_records_trailing_bytes_after_zlib(tmp_path):
    path = tmp_path / "f.tfrecord"
    path.write_bytes(zlib.compress(frame([b"x"])) + b"junk")
    with pytest.raises(CheckpointError, match=r"4 unexpected bytes after the end"):
        read_records(path)


# ---------------------------------------------------------------- snappy


def snappy_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def literal(data: bytes) -> bytes:
    n = len(data) - 1
    if n < 60:
        return bytes([n << 2]) + data
    width = (n.bit_length() + 7) // 8
    return bytes([(59 + width) << 2]) + n.to_bytes(width, "little") + data


def copy(offset: int, length: int, kind: int) -> bytes:
    if kind == 1:
        return bytes([((offset >> 8) << 5) | ((length - 4) << 2) | 1, offset & 0xFF])
    width = 2 if kind == 2 else 4
    return bytes([((length - 1) << 2) | kind]) + offset.to_bytes(width, "little")


@st.composite
def snappy_blocks(draw):
    """A random valid block and the bytes it holds, built element by element."""
    out = bytearray()
    block = bytearray()
    for _ in range(draw(st.integers(0, 12))):
        if not out or draw(st.booleans()):
            data = draw(st.binary(min_size=1, max_size=300))
            block += literal(data)
            out += data
            continue
        kind = draw(st.sampled_from([1, 2, 3]))
        if kind == 1:
            offset = draw(st.integers(1, min(len(out), 2047)))
            length = draw(st.integers(4, 11))
        else:
            offset = draw(st.integers(1, len(out)))
            length = draw(st.integers(1, 64))
        block += copy(offset, length, kind)
        for _ in range(length):  # the reference: byte by byte (overlap repeats)
            out.append(out[-offset])
    return snappy_varint(len(out)) + bytes(block), bytes(out)


@settings(max_examples=60, deadline=None)
@given(snappy_blocks())
def test_snappy_against_a_byte_by_byte_reference(case):
    block, data = case
    assert uncompress(block) == data
    assert uncompress(block, len(data)) == data


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (b"", "length prefix is truncated"),
        (snappy_varint(5) + literal(b"abc"), "holds 3 bytes, its header says 5"),
        (snappy_varint(3) + literal(b"abcd"), "overruns the block"),
        (snappy_varint(8) + literal(b"ab") + copy(3, 6, 2), "out of range"),
        (snappy_varint(8) + literal(b"ab") + bytes([2]), "offset is truncated"),
        (snappy_varint(70) + bytes([60 << 2]), "length is truncated"),
    ],
)
def test_snappy_errors(block, message):
    with pytest.raises(SnappyError, match=message):
        uncompress(block)


def test_snappy_expected_size():
    with pytest.raises(SnappyError, match="holds 3 bytes, 4 were expected"):
        uncompress(snappy_varint(3) + literal(b"abc"), 4)


# ---------------------------------------------------------------- delta encoding


def delta_encode_reference(x: np.ndarray) -> np.ndarray:
    """Reverb's encoder, step by step: row i minus row i-1 on the unsigned type (wraps)."""
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    out = u.copy()
    for i in range(1, len(u)):
        out[i] = u[i] - u[i - 1]
    return out.view(x.dtype)


@pytest.mark.parametrize(
    "dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
)
def test_delta_decode_inverts_reverbs_encoding(dtype):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (6, 3, 2), dtype=dtype, endpoint=True)
    x[2] = info.max  # wrap-around both ways
    x[3] = info.min
    with np.errstate(over="ignore"):
        encoded = delta_encode_reference(x)
    np.testing.assert_array_equal(delta_decode(encoded), x)
    assert delta_decode(encoded).dtype == x.dtype


def test_delta_decode_leaves_what_reverb_does_not_encode():
    scalars = np.array([5, -3, 7], dtype=np.int32)  # one dim: steps are scalars
    floats = np.ones((3, 2), dtype=np.float32)
    flags = np.array([[True], [False]])
    for x in (scalars, floats, flags):
        assert delta_decode(x) is x


# ---------------------------------------------------------------- tensor protos


def tensor_proto(dtype: int, shape: tuple[int, ...], **fields):
    proto = messages()["TensorProto"](dtype=dtype, **fields)
    for d in shape:
        proto.tensor_shape.dim.add(size=d)
    return proto


def test_chunk_tensor_numeric_and_delta():
    x = np.arange(24, dtype=np.int16).reshape(4, 3, 2) * 1000
    with np.errstate(over="ignore"):
        encoded = delta_encode_reference(x)
    raw = encoded.astype("<i2").tobytes()
    proto = tensor_proto(5, x.shape, tensor_content=snappy_varint(len(raw)) + literal(raw))
    np.testing.assert_array_equal(decode_chunk_tensor(proto, delta_encoded=True), x)


def test_chunk_tensor_strings():
    words = [b"", b"a", b"\x00\xff" * 100]
    content = b"".join(snappy_varint(len(w)) for w in words) + b"".join(words)
    got = decode_chunk_tensor(tensor_proto(7, (3,), tensor_content=content), False)
    assert got.dtype == object and list(got) == words
    bad = tensor_proto(7, (3,), tensor_content=content[:-1])
    with pytest.raises(TensorDecodeError, match="holds 200 bytes of text, its lengths say 201"):
        decode_chunk_tensor(bad, False)


def test_chunk_tensor_errors():
    with pytest.raises(TensorDecodeError, match="unsupported tensor dtype bfloat16"):
        decode_chunk_tensor(tensor_proto(14, (1,)), False)
    damaged = tensor_proto(1, (2,), tensor_content=snappy_varint(8) + literal(b"1234"))
    with pytest.raises(TensorDecodeError, match=r"tensor \(float32, shape \(2,\)\) is damaged"):
        decode_chunk_tensor(damaged, False)
    with pytest.raises(TensorDecodeError, match="undefined dimension"):
        decode_chunk_tensor(tensor_proto(1, (-1,)), False)


def test_plain_tensor_protos():
    assert decode_tensor_proto(tensor_proto(9, (), int64_val=[-7])).tolist() == -7
    filled = decode_tensor_proto(tensor_proto(1, (2, 2), float_val=[0.5]))
    np.testing.assert_array_equal(filled, np.full((2, 2), 0.5, np.float32))
    half = decode_tensor_proto(tensor_proto(19, (2,), half_val=[0x3C00, 0xC000]))
    np.testing.assert_array_equal(half, np.array([1.0, -2.0], np.float16))
    raw = np.array([1.5, -2.5], "<f8").tobytes()
    np.testing.assert_array_equal(
        decode_tensor_proto(tensor_proto(2, (2,), tensor_content=raw)), [1.5, -2.5]
    )
    with pytest.raises(TensorDecodeError, match=r"a tensor \(int32, shape \(1,\)\) holds 2 values"):
        decode_tensor_proto(tensor_proto(3, (1,), int_val=[1, 2]))


def test_missing_protobuf_names_the_extra(monkeypatch):
    from recollect.extras import MissingExtraError

    messages.cache_clear()
    for name in ("google.protobuf", "google.protobuf.descriptor_pool"):
        monkeypatch.setitem(sys.modules, name, None)
    try:
        with pytest.raises(MissingExtraError, match=r'pip install "recollect\[reverb\]"'):
            messages()
    finally:
        monkeypatch.undo()
        messages.cache_clear()
    assert "ChunkData" in messages()
