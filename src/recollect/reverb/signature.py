"""Table signatures: flattening spec nests and checking items against them.

A signature is a nest of specs with ``shape`` and ``dtype``: recollect's or
numpy-style ``ArraySpec``s always, ``tf.TensorSpec`` when TensorFlow is installed
(read by duck typing; TensorFlow is never imported here). Messages keep
Reverb's phrases (its tests match them) followed by our hint.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optree

from recollect.errors import SpecError

_TF_NAMES = {
    "float64": "double",
    "float32": "float",
    "float16": "half",
    "object": "string",
    "bytes": "string",
    "str": "string",
}


def dtype_name(dtype: np.dtype) -> str:
    """Reverb's (TensorFlow's) name of a numpy dtype: ``double``, ``int64``, ``string``..."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "string"
    return _TF_NAMES.get(dtype.name, dtype.name)


def shape_text(shape: tuple) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def flatten(nest: Any) -> list[Any]:
    """The leaves of a nest in Reverb's (dm-tree's) order: dict keys sorted, None kept."""
    return optree.tree_leaves(nest, none_is_leaf=True)


def is_spec(x: Any) -> bool:
    """A signature leaf: anything with ``shape`` and ``dtype`` (even a registered node)."""
    return hasattr(x, "shape") and hasattr(x, "dtype")


def flatten_with_paths(nest: Any, is_leaf: Any = None) -> list[tuple[tuple, Any]]:
    paths, leaves, _ = optree.tree_flatten_with_path(nest, is_leaf, none_is_leaf=True)
    return list(zip(paths, leaves, strict=True))


def unflatten_as(structure: Any, flat: list[Any]) -> Any:
    treedef = optree.tree_structure(structure, is_spec, none_is_leaf=True)
    return optree.tree_unflatten(treedef, list(flat))


class ColumnSpec:
    """One flattened signature column: name, numpy dtype and shape (None: any size)."""

    def __init__(self, name: str, dtype: np.dtype, shape: tuple | None) -> None:
        self.name, self.dtype, self.shape = name, dtype, shape

    def text(self) -> str:
        shape = "<unknown>" if self.shape is None else shape_text(self.shape)
        return f"Tensor<name: '{self.name}', dtype: {dtype_name(self.dtype)}, shape: {shape}>"

    def accepts(self, dtype: np.dtype, shape: tuple) -> bool:
        if dtype_name(dtype) != dtype_name(self.dtype):
            return False
        if self.shape is None:
            return True
        return len(shape) == len(self.shape) and all(
            w is None or w == g for w, g in zip(self.shape, shape, strict=True)
        )


def numpy_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype of a numpy dtype, a tf.DType (tf.string: object) or a dtype name."""
    as_np = getattr(dtype, "as_numpy_dtype", None)  # tf.DType
    if as_np is not None:
        return np.dtype(object) if getattr(dtype, "name", "") == "string" else np.dtype(as_np)
    return np.dtype(dtype)


def shape_tuple(shape: Any) -> tuple | None:
    """A shape as a tuple (unknown dims None); None for a tf.TensorShape of unknown rank."""
    as_list = getattr(shape, "as_list", None)  # tf.TensorShape
    if as_list is not None:
        if getattr(shape, "rank", 0) is None:
            return None
        return tuple(as_list())
    return tuple(None if d is None or d == -1 else int(d) for d in shape)


def columns(signature: Any) -> list[ColumnSpec] | None:
    """The flat columns of a signature (None for no signature).

    Raises:
        SpecError (a ValueError): a leaf without ``shape`` and ``dtype``.
    """
    return None if signature is None else leaf_columns(signature)


def leaf_columns(signature: Any) -> list[ColumnSpec]:
    """The flat columns of a nest of specs (one leaf spec gives one column).

    Raises:
        SpecError (a ValueError): a leaf without ``shape`` and ``dtype``.
    """
    out = []
    for path, spec in flatten_with_paths(signature, is_spec):
        if not (hasattr(spec, "shape") and hasattr(spec, "dtype")):
            raise SpecError(
                f"Unsupported signature spec: {spec!r} at path {'/'.join(map(str, path))}. "
                "Use tf.TensorSpec or an array spec with shape and dtype."
            )
        name = getattr(spec, "name", None) or "/".join(map(str, path))
        out.append(ColumnSpec(name, numpy_dtype(spec.dtype), shape_tuple(spec.shape)))
    return out


def first_misfit(
    expected: list[ColumnSpec], got: list[tuple[np.dtype, tuple]]
) -> tuple[int, ColumnSpec, np.dtype, tuple, str] | None:
    """The first column whose ``(dtype, shape)`` the signature refuses, as ``(index, spec,
    dtype, shape, expected shape text)``; None when every column fits (same lengths)."""
    for i, (spec, (dtype, shape)) in enumerate(zip(expected, got, strict=True)):
        if not spec.accepts(dtype, shape):
            return (
                i,
                spec,
                dtype,
                shape,
                "<unknown>" if spec.shape is None else shape_text(spec.shape),
            )
    return None


def check_steps(table: str, expected: list[ColumnSpec], got: list[tuple[np.dtype, tuple]]) -> None:
    """Raises SpecError unless every column's per-step ``(dtype, shape)`` fits the signature
    (the legacy ``Writer``'s items: the signature describes one step)."""
    if len(expected) != len(got):
        raise SpecError(
            f"Unable to CreateItem in table '{table}' because Append was called with a tensor "
            f"signature inconsistent with the table signature: {len(got)} tensors per step, "
            f"but the table's signature has {len(expected)}. Hint: append steps with the "
            "structure of the table's signature."
        )
    misfit = first_misfit(expected, got)
    if misfit is not None:
        i, spec, dtype, shape, want = misfit
        raise SpecError(
            f"Unable to CreateItem in table '{table}' because Append was called with a "
            "tensor signature inconsistent with the table signature. At timestep offset 0, "
            f"flattened index {i}, saw a tensor of dtype {dtype_name(dtype)}, shape "
            f"{shape_text(shape)}, but expected tensor '{spec.name}' of dtype "
            f"{dtype_name(spec.dtype)} and shape compatible with {want}. Hint: cast leaf {i} "
            f"to {np.dtype(spec.dtype)} with shape {want} before appending it."
        )


def check_item(table: str, expected: list[ColumnSpec], got: list[tuple[np.dtype, tuple]]) -> None:
    """Raises SpecError unless every item column ``(dtype, shape)`` fits the signature."""

    def listing(specs: list[str]) -> str:
        return "\n".join(f"\t{i}: {s}" for i, s in enumerate(specs))

    got_text = [
        f"Tensor<name: '{i}', dtype: {dtype_name(d)}, shape: {shape_text(s)}>"
        for i, (d, s) in enumerate(got)
    ]
    tail = (
        f"\n\nThe table signature is:\n{listing([e.text() for e in expected])}\n\n"
        f"The provided trajectory signature is:\n{listing(got_text)}.\n"
    )
    if len(expected) != len(got):
        raise SpecError(
            f"Unable to create item in table '{table}' since the provided trajectory is "
            f"inconsistent with the table signature. The table expects {len(expected)} columns "
            f"but the trajectory has {len(got)}.{tail}"
            "Hint: build the trajectory with one column per leaf of the table's signature."
        )
    misfit = first_misfit(expected, got)
    if misfit is not None:
        i, spec, dtype, shape, want = misfit
        raise SpecError(
            f"Unable to create item in table '{table}' since the provided trajectory is "
            f"inconsistent with the table signature. The table expects column {i} to be a "
            f"{dtype_name(spec.dtype)} {want} tensor but got a {dtype_name(dtype)} "
            f"{shape_text(shape)} tensor.{tail}"
            f"Hint: column {i} ('{spec.name}') must be {np.dtype(spec.dtype)} with shape "
            f"{want} (the item's time axis included); cast the data before appending it."
        )
