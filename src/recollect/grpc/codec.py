"""The transport's message format: a JSON header describing a nest, then raw array bytes.

A message is ``MAGIC (4 bytes) | header length (uint32, little-endian) | header (UTF-8
JSON) | padding | payload``. The header mirrors the nest; each array or ``bytes`` leaf
names its bytes in the payload (offset, length; offsets are 64-byte aligned), so arrays
travel as raw bytes with their dtype and shape and are read back without a copy. Nothing
is pickled, and decoding never imports or calls anything named in a message.

What travels (anything else raises :class:`~recollect.errors.InvalidArgumentTypeError`
naming the leaf's path):

- ``dict`` with ``str`` keys, ``list``, ``tuple`` (exact types: a namedtuple or a dict
  subclass would come back as another type, so it is refused), nested freely;
- numpy arrays of kinds bool, int, uint, float, complex, bytes (``S``), unicode (``U``),
  datetime and timedelta, any byte order, any shape (non-contiguous ones are copied);
  numpy scalars come back as numpy scalars;
- numpy object arrays whose every element is ``bytes`` (how Reverb holds strings): each
  element's bytes, back to back, with an int64 array of their lengths;
- ``None``, ``bool``, ``int`` (any size), ``float`` (NaN and infinities too), ``str``,
  ``bytes``.

Decoded arrays are read-only views of the received message (``arr.copy()`` to write).
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentTypeError
from recollect.grpc.errors import WireFormatError

__all__ = ["decode", "encode"]

MAGIC = b"RCG1"
_PREFIX = struct.Struct("<4sI")
_ALIGN = 64
_KINDS = frozenset("biufcSUmM")
_PAD = bytes(_ALIGN)


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class _Writer:
    """Collects the payload's parts while the header is built."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.size = 0

    def add(self, data: Any, nbytes: int) -> int:
        offset = self.size
        self.parts.append(data)
        padded = _aligned(nbytes)
        if padded != nbytes:
            self.parts.append(_PAD[: padded - nbytes])
        self.size += padded
        return offset


def _bytes_array_node(array: np.ndarray, path: str, writer: _Writer) -> dict[str, Any]:
    """An object array of bytes: its elements' lengths (int64) and their bytes joined."""
    flat = array.reshape(-1).tolist()
    if any(type(item) is not bytes for item in flat):
        bad = next(item for item in flat if type(item) is not bytes)
        raise InvalidArgumentTypeError(
            f"cannot send the numpy object array at {path!r}: it holds a "
            f"{type(bad).__name__} ({bad!r:.40}); object arrays are carried when every "
            "element is bytes. Encode str elements (e.g. np.char.encode(a, 'utf-8')) or "
            "convert the array to a numeric or 'S' dtype."
        )
    lengths = np.fromiter(map(len, flat), np.int64, len(flat))
    data = b"".join(flat)
    node: dict[str, Any] = {"s": list(array.shape), "n": len(data)}
    node["l"] = _array_node(lengths, f"{path}/<lengths>", writer)
    if data:
        node["o"] = writer.add(data, len(data))
    return {"y": node}


def _array_node(value: np.ndarray | np.generic, path: str, writer: _Writer) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.kind == "O" and isinstance(value, np.ndarray):
        return _bytes_array_node(array, path, writer)
    if array.dtype.kind not in _KINDS or array.dtype.fields is not None:
        raise InvalidArgumentTypeError(
            f"cannot send the numpy array at {path!r}: dtype {array.dtype} is not carried "
            "(bool, int, uint, float, complex, bytes 'S', unicode 'U', datetime and timedelta "
            "are, and object arrays of bytes). Convert it, e.g. to a numeric or 'S' array."
        )
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    node: dict[str, Any] = {"a": array.dtype.str, "s": list(array.shape), "n": array.nbytes}
    if array.nbytes:
        node["o"] = writer.add(array.reshape(-1).view(np.uint8).data, array.nbytes)
    if isinstance(value, np.generic):
        node["x"] = 1
    return node


def _node(value: Any, path: str, writer: _Writer) -> Any:
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if value == value and abs(value) != float("inf") else {"f": repr(value)}
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise InvalidArgumentTypeError(
                    f"cannot send the dict at {path!r}: its key {key!r} is a "
                    f"{type(key).__name__}; dict keys must be str."
                )
            out[key] = _node(item, f"{path}/{key}", writer)
        return {"d": out}
    if kind is list or kind is tuple:
        items = [_node(item, f"{path}/{i}", writer) for i, item in enumerate(value)]
        return {"l" if kind is list else "t": items}
    if isinstance(value, np.ndarray | np.generic):
        return _array_node(value, path, writer)
    if kind is bytes:
        return {"b": writer.add(value, len(value)), "n": len(value)}
    raise InvalidArgumentTypeError(
        f"cannot send the {kind.__module__}.{kind.__qualname__} at {path!r}: the transport "
        "carries dict (str keys), list, tuple, numpy arrays and scalars, None, bool, int, "
        "float, str and bytes. Convert it to one of these (a namedtuple or dataclass to a "
        "dict or tuple)."
    )


def encode(value: Any) -> bytes:
    """``value`` (a nest, see the module docstring) as one message.

    Raises:
        recollect.errors.InvalidArgumentTypeError: a leaf or container is not carried (the
            message names its path, e.g. ``'/obs/0'``).
    """
    writer = _Writer()
    header = json.dumps(_node(value, "", writer), separators=(",", ":")).encode()
    start = _PREFIX.size + len(header)
    pad = _aligned(start) - start
    return b"".join([_PREFIX.pack(MAGIC, len(header)), header, _PAD[:pad], *writer.parts])


class _Reader:
    def __init__(self, data: bytes) -> None:
        if len(data) < _PREFIX.size:
            raise WireFormatError(
                f"malformed message: {len(data)} bytes, shorter than the {_PREFIX.size}-byte "
                "prefix. Both sides must run recollect's gRPC transport."
            )
        magic, length = _PREFIX.unpack_from(data)
        if magic != MAGIC:
            raise WireFormatError(
                f"malformed message: it starts with {magic!r}, expected {MAGIC!r}. Both sides "
                "must run recollect's gRPC transport (of the same format version)."
            )
        self.view = memoryview(data)
        self.header_end = _PREFIX.size + length
        self.base = _aligned(self.header_end)
        if self.header_end > len(data):
            raise WireFormatError(
                f"malformed message: the header claims {length} bytes, but the message has "
                f"{len(data)}; it was cut short."
            )

    def header(self) -> Any:
        try:
            return json.loads(bytes(self.view[_PREFIX.size : self.header_end]))
        except ValueError as err:
            raise WireFormatError(f"malformed message: its header is not JSON ({err}).") from err

    def span(self, node: dict[str, Any]) -> memoryview:
        start = self.base + node["o"]
        stop = start + node["n"]
        if stop > len(self.view):
            raise WireFormatError(
                f"malformed message: a leaf's bytes [{start}, {stop}) run past its end "
                f"({len(self.view)} bytes)."
            )
        return self.view[start:stop]


def _array(node: dict[str, Any], reader: _Reader) -> Any:
    dtype = np.dtype(node["a"])
    if dtype.kind not in _KINDS or dtype.fields is not None:
        raise WireFormatError(f"malformed message: dtype {node['a']!r} is not carried.")
    shape = tuple(node["s"])
    if node["n"] != math.prod(shape) * dtype.itemsize or min(shape, default=0) < 0:
        raise WireFormatError(
            f"malformed message: an array of shape {shape} and dtype {dtype} claims "
            f"{node['n']} bytes."
        )
    if node["n"]:
        array = np.frombuffer(reader.span(node), dtype=dtype).reshape(shape)
    else:
        array = np.zeros(shape, dtype=dtype)
        array.flags.writeable = False
    return array[()] if "x" in node else array


def _bytes_array(node: dict[str, Any], reader: _Reader) -> np.ndarray:
    shape = tuple(node["s"])
    lengths = _array(node["l"], reader)
    if (
        not isinstance(lengths, np.ndarray)
        or lengths.dtype != np.int64
        or lengths.shape != (math.prod(shape),)
        or min(shape, default=0) < 0
        or (lengths < 0).any()
        or int(lengths.sum()) != node["n"]
    ):
        raise WireFormatError(
            f"malformed message: an object array of shape {shape} has element lengths that do "
            f"not add up to its {node['n']} bytes."
        )
    data = bytes(reader.span(node)) if node["n"] else b""
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends][: len(ends)]
    out = np.empty(len(ends), object)
    out[:] = [data[a:b] for a, b in zip(starts, ends, strict=True)]
    out = out.reshape(shape)
    out.flags.writeable = False
    return out


def _value(node: Any, reader: _Reader) -> Any:
    if type(node) is not dict:
        return node
    if "d" in node:
        return {key: _value(item, reader) for key, item in node["d"].items()}
    if "l" in node:
        return [_value(item, reader) for item in node["l"]]
    if "t" in node:
        return tuple(_value(item, reader) for item in node["t"])
    if "a" in node:
        return _array(node, reader)
    if "y" in node:
        return _bytes_array(node["y"], reader)
    if "b" in node:
        return bytes(reader.span({"o": node["b"], "n": node["n"]}))
    if "f" in node:
        return float(node["f"])
    raise WireFormatError(f"malformed message: unknown node {sorted(node)} in its header.")


def decode(data: bytes) -> Any:
    """The nest :func:`encode` made ``data`` from; arrays are read-only views of ``data``.

    Raises:
        recollect.grpc.WireFormatError: ``data`` is not such a message.
    """
    reader = _Reader(data)
    try:
        return _value(reader.header(), reader)
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, WireFormatError):
            raise
        raise WireFormatError(f"malformed message: {err!r} while reading its header.") from err
