"""Validation and safe casting of incoming steps against a :class:`FlatSpec`.

The whole batch is checked before anything is written, so bad input never
leaves a buffer half-written. A value is cast to its leaf's dtype only when
``np.can_cast(src, dst, "same_kind")`` holds and no value is lost (integers
stay in range, floats stay finite, integers converted to floats stay exact).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optree

from recollect.errors import CastError, DTypeError, ShapeError, SpecError
from recollect.specs import FlatSpec, leaf_paths

__all__ = ["check_structure", "convert_leaf", "convert_step"]


def check_structure(flat: FlatSpec, data: Any, what: str) -> list[Any]:
    """Flattens ``data`` to the spec's structure.

    Raises:
        SpecError: a leaf is missing or extra, or the nest types differ.
    """
    try:
        return flat.treedef.flatten_up_to(data)
    except (ValueError, TypeError):
        pass
    try:
        got = set(leaf_paths(data))
    except Exception:  # noqa: BLE001 - any unflattenable object is reported below
        got = set()
    want = set(flat.paths)
    missing = sorted(want - got)
    extra = sorted(got - want)
    detail = []
    if missing:
        detail.append(f"missing leaves {missing}")
    if extra:
        detail.append(f"extra leaves {extra}")
    if not detail:
        detail.append(f"structure {optree.tree_structure(data, none_is_leaf=False)}")
    raise SpecError(
        f"{what} does not match data_spec: {'; '.join(detail)}. "
        f"Expected the structure {flat.treedef} with leaves {flat.paths}."
    )


def convert_leaf(
    value: Any, shape: tuple[int, ...], dtype: np.dtype, path: str, what: str
) -> np.ndarray:
    """Returns ``value`` as an array of exactly ``shape`` and ``dtype``.

    Raises:
        ShapeError: the shape differs (leading dims included).
        DTypeError: the dtype cannot be cast with ``same_kind``.
        CastError: the cast would lose values.
    """
    arr = value if type(value) is np.ndarray else np.asarray(value)
    if arr.shape != shape:
        raise ShapeError(
            f"{what} leaf '{path}': expected shape {shape}, got {arr.shape}. "
            "Leading dims are the env/batch dims; the rest must equal the spec's shape."
        )
    if arr.dtype == dtype:
        return arr
    if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
        raise DTypeError(
            f"{what} leaf '{path}': cannot cast {arr.dtype} to the spec's {dtype} safely "
            f"(same_kind). Convert the data to {dtype} or change the spec."
        )
    _check_lossless(arr, dtype, path, what)
    return arr.astype(dtype)


def _check_lossless(arr: np.ndarray, dtype: np.dtype, path: str, what: str) -> None:
    if arr.size == 0 or dtype.kind == "b":
        return
    src = arr.dtype
    if dtype.kind in "iu" and src.kind in "iub":
        info = np.iinfo(dtype)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise CastError(
                f"{what} leaf '{path}': values in [{lo}, {hi}] do not fit {dtype} "
                f"[{info.min}, {info.max}]. Clip the data or widen the spec's dtype."
            )
    elif dtype.kind in "fc" and src.kind in "fc":
        if src.itemsize > dtype.itemsize:
            finite_in = np.isfinite(arr)
            with np.errstate(over="ignore"):
                finite_out = np.isfinite(arr.astype(dtype))
            if not np.array_equal(finite_in, finite_out):
                raise CastError(
                    f"{what} leaf '{path}': finite values overflow {dtype} "
                    f"(max {np.finfo(dtype).max}). Scale the data or widen the spec's dtype."
                )
    elif dtype.kind in "fc" and src.kind in "iu":
        back = arr.astype(dtype).astype(src)
        if not np.array_equal(back, arr):
            raise CastError(
                f"{what} leaf '{path}': integers are not exactly representable as {dtype}. "
                "Use a wider float dtype in the spec."
            )


def convert_step(
    flat: FlatSpec, data: Any, leading: tuple[int, ...], what: str
) -> list[np.ndarray]:
    """Validates a nest against the spec with ``leading`` extra dims; returns flat arrays.

    The fast path (exact dtype and shape) costs one optree flatten and one
    comparison per leaf.

    Raises:
        SpecError, ShapeError, DTypeError, CastError: see :func:`convert_leaf`.
    """
    values = check_structure(flat, data, what)
    out = []
    for value, shape, dtype, path in zip(values, flat.shapes, flat.dtypes, flat.paths, strict=True):
        if type(value) is np.ndarray and value.dtype == dtype and value.shape == leading + shape:
            out.append(value)
        else:
            out.append(convert_leaf(value, leading + shape, dtype, path, what))
    return out
