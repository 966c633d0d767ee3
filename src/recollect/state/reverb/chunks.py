"""Decoding the tensors of Reverb 0.14's chunks (and plain ``TensorProto`` values).

How dm-reverb 0.14 stores a column's data (``reverb/cc/chunker.cc``,
``reverb/cc/tensor_compression.cc``, ``reverb/cc/support/trajectory_util.cc``):

- A chunk holds consecutive steps of one episode. ``TrajectoryWriter`` (what TF-Agents'
  observers use) chunks every column on its own: ``ChunkData.data.tensors`` has one tensor
  ``[T, *step_shape]``, the column's steps concatenated. The legacy ``client.writer``
  puts every column of the steps into one chunk, one tensor per column
  (``data_tensors_len`` of them). ``FlatTrajectory.ChunkSlice.index`` names the tensor,
  ``offset``/``length`` the rows. ``data_uncompressed_size`` is the tensors' total byte
  size before any encoding; ``sequence_range`` gives the episode id and the steps
  ``start..end`` (inclusive) the rows hold.
- Delta encoding (an option of the legacy writer, ``delta_encoded=True``; off by default;
  ``ChunkData.delta_encoded``, one flag for all the chunk's tensors): applied to each
  ``[T, ...]`` tensor before compression, only when it has 2 or more dimensions
  (a step is not a scalar) and an integer dtype (int8..int64, uint8..uint64; not bool or
  floats). Row 0 is kept; row ``i`` becomes ``x[i] - x[i-1]`` computed on the same-width
  unsigned type (wrapping modulo 2**bits). Decoding is a wrapping cumulative sum over
  axis 0.
- Compression: numeric tensors keep ``dtype`` and ``tensor_shape`` and store the raw
  little-endian C-order bytes, Snappy-compressed (raw block format), in
  ``tensor_content``. String tensors are not compressed: ``tensor_content`` holds
  TensorFlow's string-list encoding (a varint32 length per element, then all bytes).

Plain ``TensorProto`` values (the bounds of a ``BoundedTensorSpec``) are read as
TensorFlow writes them: ``tensor_content`` raw bytes or the typed ``*_val`` fields, a
shorter list repeating its last value to fill the shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recollect.state.reverb.snappy import SnappyError, read_varint, uncompress

__all__ = [
    "TensorDecodeError",
    "decode_chunk_tensor",
    "decode_tensor_proto",
    "delta_decode",
    "numpy_dtype",
]

DT_STRING = 7
_NUMPY: dict[int, np.dtype] = {
    1: np.dtype("<f4"),
    2: np.dtype("<f8"),
    3: np.dtype("<i4"),
    4: np.dtype("u1"),
    5: np.dtype("<i2"),
    6: np.dtype("i1"),
    7: np.dtype(object),
    8: np.dtype("<c8"),
    9: np.dtype("<i8"),
    10: np.dtype("?"),
    17: np.dtype("<u2"),
    18: np.dtype("<c16"),
    19: np.dtype("<f2"),
    22: np.dtype("<u4"),
    23: np.dtype("<u8"),
}
_NAMES = {
    1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
    8: "complex64", 9: "int64", 10: "bool", 11: "qint8", 12: "quint8", 13: "qint32",
    14: "bfloat16", 15: "qint16", 16: "quint16", 17: "uint16", 18: "complex128",
    19: "float16", 20: "resource", 21: "variant", 22: "uint32", 23: "uint64",
}  # fmt: skip


class TensorDecodeError(ValueError):
    """A tensor's bytes do not decode; the caller adds which file and record."""


def numpy_dtype(data_type: int) -> np.dtype:
    """The numpy dtype of a TensorFlow ``DataType`` enum value (``object`` for strings).

    Raises:
        TensorDecodeError: a dtype numpy cannot hold without extra packages (bfloat16,
            quantized, resource, variant) or an unknown value.
    """
    try:
        return _NUMPY[data_type]
    except KeyError:
        name = _NAMES.get(data_type, f"DataType {data_type}")
        raise TensorDecodeError(f"unsupported tensor dtype {name}") from None


def _shape(proto: Any) -> tuple[int, ...]:
    if proto.tensor_shape.unknown_rank:
        raise TensorDecodeError("a stored tensor has an unknown rank")
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(d < 0 for d in shape):
        raise TensorDecodeError(f"a stored tensor has an undefined dimension: {shape}")
    return shape


def _decode_string_list(content: bytes, count: int) -> np.ndarray:
    """TensorFlow's string-list encoding: ``count`` varint32 lengths, then the bytes."""
    lengths = []
    pos = 0
    for _ in range(count):
        read = read_varint(content, pos, 5)  # a varint32
        if read is None:
            raise TensorDecodeError("a string tensor's length list is truncated")
        value, pos = read
        lengths.append(value)
    if pos + sum(lengths) != len(content):
        raise TensorDecodeError(
            f"a string tensor holds {len(content) - pos} bytes of text, its lengths "
            f"say {sum(lengths)}"
        )
    out = np.empty(count, dtype=object)
    for i, length in enumerate(lengths):
        out[i] = content[pos : pos + length]
        pos += length
    return out


def _strings(proto: Any, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content:
        flat = _decode_string_list(proto.tensor_content, count)
    else:
        values = list(proto.string_val)
        if len(values) != count and not (values and len(values) < count):
            raise TensorDecodeError(f"a string tensor of shape {shape} holds {len(values)} values")
        flat = np.empty(count, dtype=object)
        flat[: len(values)] = values
        flat[len(values) :] = values[-1] if values else b""
    return flat.reshape(shape)


def delta_decode(array: np.ndarray) -> np.ndarray:
    """Undoes Reverb's delta encoding of a ``[T, ...]`` integer tensor (see module doc).

    Tensors of fewer than 2 dimensions and non-integer dtypes are returned unchanged, as
    Reverb leaves them unencoded.
    """
    if array.ndim < 2 or array.dtype.kind not in "iu":
        return array
    unsigned = np.dtype(f"<u{array.dtype.itemsize}")
    decoded = np.cumsum(array.view(unsigned), axis=0, dtype=unsigned)
    return decoded.view(array.dtype)


def decode_chunk_tensor(proto: Any, delta_encoded: bool) -> np.ndarray:
    """The ``[T, ...]`` array a chunk's (compressed) ``TensorProto`` holds.

    Args:
        proto: ``ChunkData.data.tensors[i]``.
        delta_encoded: ``ChunkData.delta_encoded``.

    Returns:
        A C-contiguous array of the stored dtype (strings: an object array of ``bytes``).

    Raises:
        TensorDecodeError: unsupported dtype, bad shape, damaged Snappy block or a byte
            count that does not match the shape.
    """
    dtype = numpy_dtype(proto.dtype)
    shape = _shape(proto)
    if proto.dtype == DT_STRING:
        return _strings(proto, shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    try:
        raw = uncompress(proto.tensor_content, nbytes)
    except SnappyError as err:
        raise TensorDecodeError(
            f"the Snappy-compressed data of a tensor ({_NAMES[proto.dtype]}, shape {shape}) "
            f"is damaged: {err}"
        ) from err
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if delta_encoded:
        array = delta_decode(array)
    return array.astype(dtype.newbyteorder("="), copy=True)


_VAL_FIELDS = {
    1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val", 6: "int_val",
    9: "int64_val", 10: "bool_val", 17: "int_val", 19: "half_val", 22: "uint32_val",
    23: "uint64_val", 8: "scomplex_val", 18: "dcomplex_val",
}  # fmt: skip


def decode_tensor_proto(proto: Any) -> np.ndarray:
    """The array of an uncompressed ``TensorProto`` (as ``tf.make_tensor_proto`` writes it).

    Raises:
        TensorDecodeError: unsupported dtype, bad shape or too many values for the shape.
    """
    dtype = numpy_dtype(proto.dtype)
    shape = _shape(proto)
    if proto.dtype == DT_STRING:
        return _strings(proto, shape)
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content:
        content = proto.tensor_content
        if len(content) != count * dtype.itemsize:
            raise TensorDecodeError(
                f"a tensor ({_NAMES[proto.dtype]}, shape {shape}) holds {len(content)} bytes"
            )
        array = np.frombuffer(content, dtype=dtype)
    else:
        values = list(getattr(proto, _VAL_FIELDS[proto.dtype]))
        flat: np.ndarray
        if proto.dtype == 19:  # float16: the bits in int32 values
            flat = np.asarray(values, dtype=np.uint16).view(np.float16)
        elif proto.dtype in (8, 18):  # complex: pairs of reals
            parts = np.asarray(values, dtype=dtype.type(0).real.dtype)
            flat = parts[0::2] + 1j * parts[1::2]
        else:
            flat = np.asarray(values).astype(dtype)
        if len(flat) > count or (len(flat) == 0 and count):
            raise TensorDecodeError(
                f"a tensor ({_NAMES[proto.dtype]}, shape {shape}) holds {len(flat)} values"
            )
        array = np.empty(count, dtype=dtype)
        array[: len(flat)] = flat
        if 0 < len(flat) < count:
            array[len(flat) :] = flat[-1]
    return array.reshape(shape).astype(dtype.newbyteorder("="), copy=True)
