"""TableInfo to and from plain nests (what crosses a channel)."""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np
import optree

from recollect.reverb import signature as _signature
from recollect.reverb.reverb_types import ProtoLike, TableInfo


class TensorSpec(NamedTuple):
    """A signature leaf read back without TensorFlow: shape (None: any), numpy dtype, name."""

    shape: tuple | None
    dtype: np.dtype
    name: str | None = None


def _encode_proto(value: Any) -> Any:
    if isinstance(value, ProtoLike):
        return {"__proto__": {k: _encode_proto(v) for k, v in vars(value).items()}}
    return value


def _decode_proto(value: Any) -> Any:
    if isinstance(value, dict) and "__proto__" in value:
        return ProtoLike(**{k: _decode_proto(v) for k, v in value["__proto__"].items()})
    return value


def _encode_spec(spec: Any) -> dict[str, Any]:
    col = _signature.leaf_columns(spec)[0]
    return {
        "__spec__": [
            getattr(spec, "name", None),
            col.dtype.str,
            None if col.shape is None else [-1 if d is None else d for d in col.shape],
        ]
    }


def encode_signature(signature: Any) -> Any:
    if signature is None:
        return None
    return optree.tree_map(_encode_spec, signature, is_leaf=_signature.is_spec, none_is_leaf=True)


def _decode_spec(node: list[Any]) -> Any:
    name, dtype, shape = node
    shape = None if shape is None else tuple(None if d == -1 else int(d) for d in shape)
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        tf_dtype = tf.string if np.dtype(dtype).kind in "OSU" else tf.as_dtype(np.dtype(dtype))
        return tf.TensorSpec(shape, tf_dtype, name)
    return TensorSpec(shape, np.dtype(dtype), name)


def decode_signature(node: Any) -> Any:
    if node is None:
        return None
    if isinstance(node, dict) and "__spec__" in node:
        return _decode_spec(node["__spec__"])
    if isinstance(node, dict):
        return {k: decode_signature(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        values = [decode_signature(v) for v in node]
        if hasattr(node, "_fields"):  # a namedtuple (e.g. TF-Agents' Trajectory)
            return type(node)(*values)
        return type(node)(values)
    return node


def encode_info(info: TableInfo) -> dict[str, Any]:
    out = {f: _encode_proto(getattr(info, f)) for f in TableInfo.__dataclass_fields__}
    out["signature"] = encode_signature(info.signature)
    return out


def decode_info(node: dict[str, Any]) -> TableInfo:
    fields = {k: _decode_proto(v) for k, v in node.items()}
    fields["signature"] = decode_signature(node["signature"])
    return TableInfo(**fields)
