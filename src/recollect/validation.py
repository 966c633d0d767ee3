"""Validation and safe casting of incoming steps against a :class:`FlatSpec`.

The whole batch is checked before anything is written, so bad input never
leaves a buffer half-written. A value is cast to its leaf's dtype only when
``np.can_cast(src, dst, "same_kind")`` holds and no value is lost (integers
stay in range, floats stay finite, integers converted to floats stay exact).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from recollect.errors import CastError, DTypeError, ShapeError, SpecError
from recollect.specs import FlatSpec, leaf_paths

__all__ = ["as_numpy", "check_structure", "convert_leaf", "convert_step", "exact_matcher"]


def as_numpy(value: Any, path: str, what: str) -> np.ndarray:
    """``np.asarray(value)``; a tensor whose dtype numpy lacks raises :class:`DTypeError`.

    Ragged nested sequences become an object array (reported by the caller).
    """
    try:
        return np.asarray(value)
    except ValueError:  # ragged nested sequences
        return np.empty((), dtype=object)
    except TypeError as err:  # e.g. torch.bfloat16: "Got unsupported ScalarType BFloat16"
        raise DTypeError(
            f"{what} leaf '{path}': got a {type(value).__name__} of dtype "
            f"{getattr(value, 'dtype', '?')}, which has no numpy equivalent. Convert it first, "
            "e.g. tensor.float() (torch) or a cast to the spec's dtype."
        ) from err


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
    except Exception:  # any unflattenable object is reported below
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
    value: Any,
    shape: tuple[int, ...],
    dtype: np.dtype,
    path: str,
    what: str,
    lead: int = 0,
    owner: str = "buffer",
) -> np.ndarray:
    """Returns ``value`` as an array of exactly ``shape`` and ``dtype``.

    ``lead`` is how many of ``shape``'s dims are env dims in front of the
    spec's shape (1 for ``add_batch``: ``[num_envs]``); it only shapes the message,
    as ``owner`` does: whose ``num_envs`` that is (``"buffer"`` or a served table's
    ``"writer"``).

    Raises:
        ShapeError: the shape differs (leading dims included).
        DTypeError: the dtype cannot be cast with ``same_kind``, or has no numpy
            equivalent (``torch.bfloat16``).
        CastError: the cast would lose values.
    """
    arr = value if type(value) is np.ndarray else as_numpy(value, path, what)
    if arr.dtype.hasobject:
        raise SpecError(
            f"{what} leaf '{path}': expected an array of shape {shape} and dtype {dtype}, "
            f"got {type(value).__name__}: {value!r:.80}. Pass one array (not a nest, None "
            "or ragged lists) per spec leaf."
        )
    if arr.shape != shape:
        raise ShapeError(
            f"{what} leaf '{path}': expected shape {shape}, got {arr.shape}. "
            + _shape_hint(arr.shape, shape, lead, owner)
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


def _shape_hint(got: tuple[int, ...], shape: tuple[int, ...], lead: int, owner: str) -> str:
    spec_shape = shape[lead:]
    if lead == 0:
        return f"One step must have exactly the spec's shape {spec_shape}."
    if lead == 1:
        # whose num_envs: a served table's writer has its own (the rows it leases)
        make = "open the writer" if owner == "writer" else f"create the {owner}"
        hint = (
            f"The first dim is the {owner}'s num_envs={shape[0]} (one step per env row), "
            f"the rest the spec's shape {spec_shape}."
        )
        if len(got) == len(shape) and got[1:] == spec_shape:
            hint += (
                f" Give every leaf a leading dim of {shape[0]}, or {make} with num_envs={got[0]}."
            )
        return hint
    return f"The first {lead} dims are {shape[:lead]}, the rest the spec's shape {spec_shape}."


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


def _fast_plan(flat: FlatSpec, leading: tuple[int, ...]) -> tuple[Any, int, list[tuple]]:
    """Cached per spec and leading dims: (key getter of a flat dict spec or None, leaves,
    ``[(full shape, dtype)]``)."""
    plans = flat.__dict__.get("_convert_plans")
    if plans is None:
        plans = flat.__dict__["_convert_plans"] = {}
    plan = plans.get(leading)
    if plan is None:
        spec, keys = flat.spec, list(flat.paths)
        getter = None
        if type(spec) is dict and all(type(k) is str for k in spec) and keys == sorted(spec):
            getter = operator.itemgetter(*keys) if len(keys) > 1 else lambda d: (d[keys[0]],)
        expected = [(leading + s, d) for s, d in zip(flat.shapes, flat.dtypes, strict=True)]
        plan = plans[leading] = (getter, len(keys), expected)
    return plan


#: 0-d leaves that take a Python scalar exactly: bool (np.bool_) and float (float64)
_EXACT_PYTHON = {np.dtype(np.bool_): bool, np.dtype(np.float64): float}


def exact_matcher(flat: FlatSpec, leading: tuple[int, ...]) -> Callable[[Any], Any]:
    """A per-spec check of the common case: ``match(data)`` returns the flat leaves of ``data``
    when it needs no conversion, else None (then :func:`convert_step` decides and raises).

    The common case: ``data`` has the spec's nest structure (for a flat dict spec: a plain
    dict with exactly its keys) and every leaf is a ``numpy.ndarray`` (no subclass; for a
    0-d leaf also the numpy scalar type of its dtype) of exactly ``leading + leaf shape``
    and of the spec's dtype object (native byte order); a 0-d leaf of dtype bool or
    float64 may also be a Python ``bool`` or ``float`` (``add``'s ``is_last=False``), the
    same value exactly. Those leaves are what :func:`convert_step` returns for the same
    ``data`` (the same objects, nothing copied; a Python scalar stays one, where
    ``convert_step`` makes a 0-d array of it: a numpy write stores the same); anything
    else returns None, writes nothing and raises nothing.

    The check is one generated expression per spec, ``type(v0) is ndarray and v0.shape ==
    s0 and v0.dtype is d0 and ...`` (no loop: a third cheaper than one over the leaves, the
    difference that matters on ``add_batch``'s ~3 us). Only leaf numbers are formatted into
    its source; shapes, dtypes and the getter are bound as names.

    Args:
        flat: the flattened spec.
        leading: env dims in front of every leaf's shape (``(num_envs,)`` for ``add_batch``).

    Returns:
        ``match(data) -> tuple | list | None`` of ``np.ndarray``.
    """
    getter, n, expected = _fast_plan(flat, leading)
    names: dict[str, Any] = {"ndarray": np.ndarray, "getter": getter}
    names["flatten_up_to"] = flat.treedef.flatten_up_to
    checks = []
    for i, (shape, dtype) in enumerate(expected):
        names[f"s{i}"], names[f"d{i}"], names[f"g{i}"] = shape, dtype, dtype.type
        # a 0-d leaf may also be the numpy scalar of its dtype (what indexing or a
        # reduction returns, e.g. ``np.float32(r)``): storage writes take it as is
        check = f"type(v{i}) is ndarray and v{i}.shape == s{i} and v{i}.dtype is d{i}"
        if shape == () and dtype.isnative:  # its scalar type implies dtype and shape ()
            check = f"(type(v{i}) is g{i} or {check})"
            python = _EXACT_PYTHON.get(dtype)
            if python is not None:  # a Python bool or float of that dtype, stored as it is
                names[f"p{i}"] = python
                check = f"(type(v{i}) is p{i} or {check[1:]}"
        checks.append(check)
    unpack = "".join(f"v{i}, " for i in range(n))
    if getter is not None:  # same key set as the spec: what flatten_up_to returns, sans optree
        flatten = (
            f"    if type(data) is not dict or len(data) != {n}:\n"
            "        return None\n"
            "    try:\n"
            "        values = getter(data)\n"
            "    except KeyError:\n"
            "        return None\n"
        )
    else:
        flatten = (
            "    try:\n"
            "        values = flatten_up_to(data)\n"
            "    except (ValueError, TypeError):\n"
            "        return None\n"
        )
    source = (
        "def match(data):\n"
        + flatten
        + f"    ({unpack}) = values\n"
        + f"    if {' and '.join(checks) or 'True'}:\n"
        + "        return values\n"
        + "    return None\n"
    )
    exec(source, names)  # generated from leaf numbers only (see above)
    return names["match"]


def convert_step(
    flat: FlatSpec, data: Any, leading: tuple[int, ...], what: str, owner: str = "buffer"
) -> list[np.ndarray]:
    """Validates a nest against the spec with ``leading`` extra dims; returns flat arrays.

    The fast path (exact dtype and shape) costs one key lookup per leaf for a
    plain dict matching a flat dict spec (else one optree flatten) and one
    comparison per leaf; anything else goes through :func:`convert_leaf`.

    Raises:
        SpecError, ShapeError, DTypeError, CastError: see :func:`convert_leaf`.
    """
    getter, n, expected = _fast_plan(flat, leading)
    values = None
    if getter is not None and type(data) is dict and len(data) == n:
        try:  # same key set as the spec: what flatten_up_to returns, without optree
            values = getter(data)
        except KeyError:
            values = None
    if values is None:
        values = check_structure(flat, data, what)
    # Same length by construction; zip(strict=True) would cost a third of this loop.
    for value, (shape, dtype) in zip(values, expected):  # noqa: B905
        if (
            type(value) is not np.ndarray
            or value.shape != shape
            or (value.dtype is not dtype and value.dtype != dtype)
        ):  # anything unusual takes the complete path (same results and errors as ever)
            # ``values`` is already check_structure's result: the getter reads a flat dict
            # spec's keys in sorted order, as optree flattens dicts.
            return _convert_leaves(flat, values, leading, what, owner)
    return list(values)


def _convert_leaves(
    flat: FlatSpec, values: list[Any], leading: tuple[int, ...], what: str, owner: str = "buffer"
) -> list[np.ndarray]:
    out = []
    for value, shape, dtype, path in zip(values, flat.shapes, flat.dtypes, flat.paths, strict=True):
        if type(value) is np.ndarray and value.dtype == dtype and value.shape == leading + shape:
            out.append(value)
        else:
            out.append(convert_leaf(value, leading + shape, dtype, path, what, len(leading), owner))
    return out
