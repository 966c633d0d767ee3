"""Requests and replies as header values plus raw array buffers: the encoding any transport
between processes uses (no pickle).

:func:`encode` turns a value (a :class:`~recollect.service.wire.requests.Request`, what a
shard returns, a :class:`~recollect.service.wire.endpoint.Raised` error) into a JSON
header and a list of raw, C-contiguous array buffers; :func:`decode` turns them back.
Arrays travel as ``{"$t": "nd", "b": buffer index, "d": dtype.str, "s": shape}`` in
the header and their bytes in the buffer: no pickle, so a peer can send nothing but
data. A transport that carries one byte string per message uses :func:`pack` and
:func:`unpack` (the header and the buffers in one frame, each buffer 8-byte aligned,
so decoding makes no copy of the arrays); one that has fields of its own (gRPC: a
bytes field for the header, a repeated bytes field for the buffers) uses
:func:`encode` and :func:`decode` directly.

What the header holds: ``None``, bools, ints, floats (NaN and infinities too), strs,
lists, tuples, dicts (any keys of these kinds), namedtuples (decoded as the sender's
class when this process has imported it, else as a namedtuple of the same name and
fields), numpy arrays, scalars and dtypes, bytes, and the service's own dataclasses
(requests, replies, ``TableInfo``, ``Sample``, ``ArraySpec``). An exception travels as
its type's name and message: recollect's errors and Python's built-in ones keep their
type; any other arrives as a :class:`~recollect.errors.StateError` naming it.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import json.encoder
import json.scanner
import struct
import sys
from collections import namedtuple
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from recollect import errors
from recollect.buffers import Sample
from recollect.errors import StateError
from recollect.service.wire import replies, requests
from recollect.service.wire.endpoint import Raised
from recollect.service.wire.protocol import ShardProtocol
from recollect.specs import ArraySpec
from recollect.table import TableInfo

__all__ = ["CodecError", "answer", "decode", "encode", "pack", "packed", "respond", "unpack"]

#: the first bytes of a packed message (format version 1)
MAGIC = b"RCW1"
_HEAD = struct.Struct("<4sII")  # magic, header bytes, buffers
_LENGTH = struct.Struct("<Q")
_ALIGN = 8
#: one encoder for every header (``json.dumps`` with arguments builds a new one per call)
_JSON = json.JSONEncoder(separators=(",", ":"))
#: the C function ``_JSON.encode`` builds anew for each call (most of what a small header's
#: encoding costs), built once; None where the C accelerator is missing.
#: No circular-reference check: the tree :class:`_Encoder` builds is new and acyclic.
_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Any = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        None,  # markers: no circular check
        _JSON.default,
        json.encoder.encode_basestring_ascii,
        None,  # indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan: NaN and infinities travel (as json.dumps writes them)
    )
)
#: ``json.loads`` without its per-call work on bytes (encoding detection, whitespace regex)
_SCAN: Any = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
#: dtypes by their ``str`` (parsing one costs about 1 us; a peer sends few kinds)
_DTYPES: dict[str, np.dtype] = {}
_MAX_DTYPES = 256


class CodecError(StateError):
    """A value that cannot be encoded, or bytes that are not a message of this codec."""


def _registry() -> dict[str, type]:
    found: dict[str, type] = {}
    for module in (requests, replies):
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                found[value.__name__] = value
    for cls in (TableInfo, Sample, ArraySpec, Raised):
        found[cls.__name__] = cls
    return found


_CLASSES = _registry()
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _CLASSES.values()}
_ERRORS: dict[str, type[BaseException]] = {
    name: value
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, Exception)
}
_ERRORS[CodecError.__name__] = CodecError
_BUILTIN_ERRORS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception) and not name.startswith("_")
)


class _Encoder:
    def __init__(self) -> None:
        self.buffers: list[memoryview] = []

    def buffer(self, data: Any) -> int:
        """Keeps ``data`` (bytes, or a C-contiguous array) as the next buffer; its index."""
        view = memoryview(data)
        try:
            view = view.cast("B")  # the fast way; not for empty or non-native-order arrays
        except (TypeError, ValueError):
            if isinstance(data, np.ndarray):
                view = memoryview(data.reshape(-1).view(np.uint8).data)
        self.buffers.append(view)
        return len(self.buffers) - 1

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            return value
        if kind is list:
            return [self(v) for v in value]
        names = _FIELDS.get(kind)
        if names is not None:  # one of the service's dataclasses
            return {"$t": kind.__name__, "f": {n: self(getattr(value, n)) for n in names}}
        if kind is np.ndarray:
            if value.dtype.hasobject:
                raise CodecError(
                    f"cannot send an array of dtype {value.dtype} (Python objects); send "
                    "arrays of fixed-size dtypes."
                )
            array = value if value.flags.c_contiguous else np.ascontiguousarray(value)
            return {"$t": "nd", "b": self.buffer(array), "d": value.dtype.str, "s": value.shape}
        if kind is dict:
            return {"$t": "dict", "v": [[self(k), self(v)] for k, v in value.items()]}
        if kind is tuple:
            return {"$t": "tuple", "v": [self(v) for v in value]}
        if isinstance(value, np.generic):
            return {"$t": "np", "d": value.dtype.str, "v": value.item()}
        if isinstance(value, np.dtype):
            return {"$t": "dtype", "d": value.str}
        if kind is bytes:
            return {"$t": "bytes", "b": self.buffer(value)}
        if isinstance(value, BaseException):
            args = value.args  # KeyError's str() quotes its one argument: send that
            message = args[0] if len(args) == 1 and type(args[0]) is str else str(value)
            return {"$t": "error", "type": kind.__name__, "msg": message}
        if isinstance(value, tuple) and hasattr(kind, "_fields"):  # a namedtuple
            return {
                "$t": "namedtuple",
                "m": kind.__module__,
                "n": kind.__qualname__,
                "f": list(kind._fields),
                "v": [self(v) for v in value],
            }
        raise CodecError(
            f"cannot send a value of type {kind.__module__}.{kind.__qualname__} to or from a "
            "shard: the wire carries numbers, strings, lists, tuples, dicts, namedtuples, "
            "numpy arrays and the service's requests and replies."
        )


def _error(name: str, message: str) -> BaseException:
    cls = _ERRORS.get(name)
    if cls is None and name in _BUILTIN_ERRORS:
        cls = getattr(builtins, name)
    if cls is None:
        return StateError(f"the shard raised {name}: {message}")
    return cls(message)


def _namedtuple(module: str, name: str, fields: list[str]) -> Any:
    """The sender's namedtuple class when this process imported it (never imports), else a
    namedtuple class of the same name and fields."""
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, tuple):
        if list(getattr(found, "_fields", ())) == fields:
            return found
    return namedtuple(name.rsplit(".", 1)[-1], fields)


def _dtype(name: Any) -> np.dtype:
    """``np.dtype(name)``, cached for str names."""
    dtype = _DTYPES.get(name) if type(name) is str else None
    if dtype is None:
        dtype = np.dtype(name)
        if type(name) is str and len(_DTYPES) < _MAX_DTYPES:
            _DTYPES[name] = dtype
    return dtype


def _dumps(tree: Any) -> bytes:
    """``tree`` (of JSON types) as compact ASCII JSON, as ``_JSON.encode`` writes it."""
    if _C_ENCODE is None:
        return _JSON.encode(tree).encode()
    return "".join(_C_ENCODE(tree, 0)).encode()


def _loads(header: bytes | memoryview) -> Any:
    """The JSON value of ``header`` (UTF-8), as ``json.loads`` reads it.

    Raises:
        ValueError: not one JSON value (StopIteration of an empty one included).
    """
    text = str(header, "utf-8")
    try:
        tree, end = _SCAN(text, 0)
    except StopIteration as err:
        raise ValueError(f"Expecting value at {err.value}") from None
    if end != len(text) and text[end:].strip():
        raise ValueError(f"Extra data at {end}")
    return tree


class _Decoder:
    def __init__(self, buffers: Sequence[Any]) -> None:
        self.buffers = buffers

    def __call__(self, value: Any) -> Any:
        if type(value) is list:
            return [self(v) for v in value]
        if type(value) is not dict:
            return value
        kind = value.get("$t")
        try:
            if kind == "nd":
                dtype = _dtype(value["d"])
                if dtype.hasobject:
                    raise CodecError(f"an array of dtype {dtype} (Python objects)")
                data = self.buffers[value["b"]]
                return np.frombuffer(data, dtype).reshape(value["s"])
            if kind == "dict":
                return {self(k): self(v) for k, v in value["v"]}
            if kind == "tuple":
                return tuple(self(v) for v in value["v"])
            if kind == "np":
                return _dtype(value["d"]).type(value["v"])
            if kind == "dtype":
                return _dtype(value["d"])
            if kind == "bytes":
                return bytes(self.buffers[value["b"]])
            if kind == "error":
                return _error(str(value["type"]), str(value["msg"]))
            if kind == "namedtuple":
                cls = _namedtuple(str(value["m"]), str(value["n"]), list(value["f"]))
                return cls(*[self(v) for v in value["v"]])
            cls = _CLASSES[str(kind)]
            return cls(**{k: self(v) for k, v in value["f"].items()})
        except CodecError:
            raise
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise CodecError(
                f"a message of the service's wire format is damaged or of another version "
                f"(at a value of kind {kind!r}: {type(err).__name__}: {err})."
            ) from err


def encode(value: Any) -> tuple[bytes, list[memoryview]]:
    """``value`` as a JSON header (UTF-8 bytes) and its arrays' raw buffers, in order.

    Raises:
        CodecError: a value the wire does not carry (an object array, an unknown class).
    """
    encoder = _Encoder()
    header = _dumps(encoder(value))
    return header, encoder.buffers


def decode(header: bytes | memoryview, buffers: Sequence[Any]) -> Any:
    """The value :func:`encode` gave ``header`` and ``buffers`` for. Arrays are views of
    ``buffers`` (writable when the buffers are).

    Raises:
        CodecError: the header is not one of this codec.
    """
    try:
        tree = _loads(header)
    except ValueError as err:
        raise CodecError(f"a message header is not the service's wire format ({err}).") from err
    return _Decoder(buffers)(tree)


def pack(value: Any) -> list[bytes | memoryview]:
    """``value`` as the parts of one message (join them, or write them one after another):
    ``MAGIC``, the header's and the buffers' lengths, the header, then each buffer padded
    to 8 bytes.

    Raises:
        CodecError: as :func:`encode`.
    """
    header, buffers = encode(value)
    lengths = b"".join(_LENGTH.pack(len(b)) for b in buffers)
    parts: list[bytes | memoryview] = [_HEAD.pack(MAGIC, len(header), len(buffers)), lengths]
    size = _HEAD.size + len(lengths) + len(header)
    parts.append(header + bytes(-size % _ALIGN))
    for buffer in buffers:
        parts.append(buffer)
        if len(buffer) % _ALIGN:
            parts.append(bytes(-len(buffer) % _ALIGN))
    return parts


def unpack(message: bytes | bytearray | memoryview) -> Any:
    """The value of a message :func:`pack` made. Arrays are views of ``message`` (pass a
    ``bytearray`` for writable arrays).

    Raises:
        CodecError: ``message`` is not one of this codec (or cut short).
    """
    view = memoryview(message).cast("B")
    if len(view) < _HEAD.size:
        raise CodecError(f"a message of {len(view)} bytes is shorter than the wire's header.")
    magic, header_size, count = _HEAD.unpack_from(view)
    if magic != MAGIC:
        raise CodecError(
            f"a message does not start with {MAGIC!r} (got {bytes(magic)!r}): not the "
            "service's wire format, or another version of it."
        )
    at = _HEAD.size + count * _LENGTH.size
    if at > len(view):
        raise CodecError("a message was cut short (its buffer lengths are missing).")
    lengths = [_LENGTH.unpack_from(view, _HEAD.size + i * _LENGTH.size)[0] for i in range(count)]
    header = view[at : at + header_size]
    at += header_size
    at += -at % _ALIGN
    buffers = []
    for length in lengths:
        if at + length > len(view):
            raise CodecError("a message was cut short (an array's bytes are missing).")
        buffers.append(view[at : at + length])
        at += length + (-length % _ALIGN)
    return decode(header, buffers)


def packed(value: Any) -> bytes:
    """:func:`pack` joined into one byte string (what Ray calls and sockets carry).

    Raises:
        CodecError: as :func:`encode`.
    """
    return b"".join(pack(value))


def respond(shard: ShardProtocol, message: bytes | bytearray | memoryview) -> bytes:
    """The shard's end of a byte transport: applies the request packed in ``message`` to
    ``shard`` and returns its answer packed; what the shard raised (or a damaged message)
    goes back as :class:`Raised`, an answer the wire cannot carry as a StateError.
    Raises nothing."""
    value: Any
    try:
        value = unpack(message).apply(shard)
    except Exception as err:  # carried to the caller and raised there
        value = Raised(err)
    try:
        return packed(value)
    except CodecError as err:
        return packed(Raised(StateError(f"the shard's answer could not be sent back ({err}).")))


def answer(message: bytes | bytearray | memoryview) -> Any:
    """The caller's end: the shard's return value packed in ``message`` (arrays writable,
    in a copy of ``message``); raises what the shard raised.

    Raises:
        CodecError: ``message`` is not one of this codec.
    """
    value = unpack(bytearray(message))
    if type(value) is Raised:
        raise value.error
    return value
