"""A Reverb table's signature (a ``tensorflow.StructuredValue``) as a nest of specs.

TensorFlow's ``nest_structure_coder`` writes a nest of ``tf.TensorSpec`` /
``tf.BoundedTensorSpec`` as a tree of ``StructuredValue`` messages: ``dict_value``,
``tuple_value``, ``list_value``, ``named_tuple_value`` (a name and ordered key/value
pairs) and leaves ``tensor_spec_value`` / ``bounded_tensor_spec_value``. Here the
containers become ``dict`` (keys sorted), ``tuple``, ``list`` and ``collections.namedtuple``
classes made on the fly; the leaves become :class:`ReverbTensorSpec`. Reverb's columns are
the leaves in ``tf.nest.flatten`` order (dict keys sorted, namedtuple fields in order),
which :func:`flatten_signature` reproduces.
"""

from __future__ import annotations

import collections
import dataclasses
import keyword
from typing import Any

import numpy as np
import optree

from recollect.specs import ArraySpec
from recollect.state.reverb.chunks import TensorDecodeError, decode_tensor_proto, numpy_dtype

__all__ = [
    "ReverbTensorSpec",
    "decode_signature",
    "flatten_signature",
    "map_signature",
    "unflatten_signature",
]


@dataclasses.dataclass(frozen=True, eq=False)
class ReverbTensorSpec:
    """One leaf of a Reverb table's signature (a ``tf.TensorSpec`` / ``tf.BoundedTensorSpec``).

    Attributes:
        shape: the spec's shape, ``None`` for an unknown dimension (TF-Agents' tables have
            an unknown leading time dimension, e.g. ``(None, 4)``); ``None`` for an unknown
            rank.
        dtype: numpy dtype; ``object`` for ``tf.string`` (values are ``bytes``).
        name: the spec's name, or None when it had none.
        minimum: a ``BoundedTensorSpec``'s minimum (an array broadcastable to the step
            shape), else None.
        maximum: its maximum, else None.
    """

    shape: tuple[int | None, ...] | None
    dtype: np.dtype
    name: str | None = None
    minimum: np.ndarray | None = None
    maximum: np.ndarray | None = None

    @property
    def bounded(self) -> bool:
        """Whether the spec was a ``BoundedTensorSpec``."""
        return self.minimum is not None

    def array_spec(self, drop_leading: bool = False) -> ArraySpec:
        """This leaf as a recollect :class:`~recollect.specs.ArraySpec` (same name).

        Args:
            drop_leading: drop the first dimension (the time dimension of a column whose
                items hold several steps, e.g. ``(None, 4)`` -> ``(4,)``).

        Raises:
            SpecError: the (remaining) shape has an unknown dimension or rank, or the
                dtype is ``string`` (recollect stores fixed-size dtypes only).
        """
        from recollect.errors import SpecError

        if self.shape is None:
            raise SpecError(f"Reverb signature leaf {self.name!r} has an unknown rank.")
        shape = self.shape[1:] if drop_leading and self.shape else self.shape
        if any(d is None for d in shape):
            raise SpecError(
                f"Reverb signature leaf {self.name!r} has shape {self.shape}: an unknown "
                "dimension other than the leading one cannot become an ArraySpec."
            )
        return ArraySpec(tuple(int(d) for d in shape if d is not None), self.dtype, self.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReverbTensorSpec):
            return NotImplemented
        return (
            self.shape == other.shape
            and self.dtype == other.dtype
            and self.name == other.name
            and _same(self.minimum, other.minimum)
            and _same(self.maximum, other.maximum)
        )


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b))


def _shape(proto: Any) -> tuple[int | None, ...] | None:
    if proto.unknown_rank:
        return None
    return tuple(None if d.size < 0 else int(d.size) for d in proto.dim)


def _leaf(spec: Any, bounded: bool) -> ReverbTensorSpec:
    dtype = numpy_dtype(spec.dtype)
    minimum = maximum = None
    if bounded:
        minimum = decode_tensor_proto(spec.minimum)
        maximum = decode_tensor_proto(spec.maximum)
    return ReverbTensorSpec(_shape(spec.shape), dtype, spec.name or None, minimum, maximum)


def _namedtuple(name: str, keys: list[str]) -> Any:
    valid = name.isidentifier() and not keyword.iskeyword(name)
    fields_ok = all(k.isidentifier() and not k.startswith("_") for k in keys)
    if not (valid and fields_ok and len(set(keys)) == len(keys)):
        return None
    return collections.namedtuple(name, keys)


def decode_signature(value: Any) -> Any:
    """The nest a ``StructuredValue`` describes, leaves as :class:`ReverbTensorSpec`.

    Raises:
        TensorDecodeError: a kind of value a Reverb signature does not hold (a
            ``TypeSpec`` other than a tensor spec, a bare tensor) or a bad bound.
    """
    kind = value.WhichOneof("kind")
    if kind == "tensor_spec_value":
        return _leaf(value.tensor_spec_value, bounded=False)
    if kind == "bounded_tensor_spec_value":
        return _leaf(value.bounded_tensor_spec_value, bounded=True)
    if kind == "dict_value":
        fields = value.dict_value.fields
        return {key: decode_signature(fields[key]) for key in sorted(fields)}
    if kind == "tuple_value":
        return tuple(decode_signature(v) for v in value.tuple_value.values)
    if kind == "list_value":
        return [decode_signature(v) for v in value.list_value.values]
    if kind == "named_tuple_value":
        pairs = value.named_tuple_value.values
        keys = [p.key for p in pairs]
        values = [decode_signature(p.value) for p in pairs]
        cls = _namedtuple(value.named_tuple_value.name, keys)
        if cls is None:  # a name Python cannot use: keep the fields, in order
            return dict(zip(keys, values, strict=True))
        return cls(*values)
    if kind == "none_value" or kind is None:
        return None
    raise TensorDecodeError(f"a signature holds a {kind}, which is not a spec or container")


def _is_leaf(x: Any) -> bool:
    return isinstance(x, ReverbTensorSpec)


def flatten_signature(signature: Any) -> list[ReverbTensorSpec]:
    """The signature's leaves in Reverb's column order (``tf.nest.flatten`` order)."""
    leaves: list[ReverbTensorSpec] = optree.tree_leaves(
        signature, is_leaf=_is_leaf, none_is_leaf=False
    )
    return leaves


def unflatten_signature(signature: Any, columns: list[Any]) -> Any:
    """``columns`` (one per leaf, in column order) put into the signature's structure."""
    treedef = optree.tree_structure(signature, is_leaf=_is_leaf, none_is_leaf=False)
    return optree.tree_unflatten(treedef, columns)


def map_signature(fn: Any, signature: Any) -> Any:
    """``fn`` applied to every leaf of the signature, in its structure."""
    return optree.tree_map(fn, signature, is_leaf=_is_leaf, none_is_leaf=False)
