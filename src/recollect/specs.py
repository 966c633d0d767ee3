"""Specs: the shape and dtype of every leaf of ONE step.

A spec is any nest (dict, tuple, list, namedtuple, nested) whose leaves are
:class:`ArraySpec` or anything with ``.shape`` and ``.dtype`` (``tf.TensorSpec``,
TF-Agents ``ArraySpec``, a numpy array, a ``jax.ShapeDtypeStruct``). Nests are
handled with optree; leaves are addressed by their path, e.g.
``observation/camera``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import optree

from recollect.errors import SpecError

__all__ = [
    "ArraySpec",
    "FlatSpec",
    "leaf_names",
    "leaf_paths",
    "normalize_spec",
    "spec_from_example",
    "spec_from_space",
]


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one leaf of one step.

    Args:
        shape: per-step shape, e.g. ``(84, 84, 4)``; ``()`` for a scalar.
        dtype: anything ``np.dtype`` accepts (``np.float32``, ``"uint8"``).
        name: optional human-readable name (not used for addressing).

    Raises:
        SpecError: a dimension is negative or not an int, or the dtype is not
            a fixed-size numpy dtype.

    Example:
        >>> ArraySpec((4,), np.float32)
        ArraySpec(shape=(4,), dtype=dtype('float32'), name=None)
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    name: str | None = None

    if TYPE_CHECKING:  # the generated __init__ takes any sequence and any dtype-like

        def __init__(
            self, shape: Sequence[int], dtype: npt.DTypeLike, name: str | None = None
        ) -> None: ...

    def __post_init__(self) -> None:
        try:
            shape = tuple(int(d) for d in self.shape)
        except (TypeError, ValueError) as err:
            raise SpecError(
                f"ArraySpec shape must be a sequence of ints; got {self.shape!r}. "
                "Use fully defined shapes (no None dimensions)."
            ) from err
        if any(d < 0 for d in shape):
            raise SpecError(f"ArraySpec shape must not be negative; got {shape}.")
        try:
            dtype = np.dtype(self.dtype)
        except TypeError as err:
            raise SpecError(f"ArraySpec dtype {self.dtype!r} is not a numpy dtype.") from err
        if dtype.hasobject or dtype.itemsize == 0:
            raise SpecError(
                f"ArraySpec dtype must be a fixed-size numeric or bool dtype; got {dtype}."
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    @property
    def nbytes(self) -> int:
        """Bytes one step of this leaf occupies."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @classmethod
    def from_spec(cls, spec: Any, name: str | None = None) -> ArraySpec:
        """Converts anything with ``.shape`` and ``.dtype`` into an :class:`ArraySpec`.

        Works for ``tf.TensorSpec`` and TF-Agents specs without importing their
        framework: a TensorShape is read with ``as_list()``, a ``tf.DType``
        through ``as_numpy_dtype``, a torch dtype through its name.

        Raises:
            SpecError: ``spec`` has no shape/dtype or an undefined dimension.
        """
        if isinstance(spec, ArraySpec):
            return spec
        dtype_name = _dtype_name(spec)
        if dtype_name is not None:
            numpy_name = np.dtype(dtype_name.removeprefix("torch.")).name
            raise SpecError(
                f"got the dtype {dtype_name} instead of a spec; a spec leaf needs a shape "
                f"and a dtype. Use recollect.ArraySpec(shape, dtype), e.g. "
                f"ArraySpec((), np.{numpy_name}) for a scalar or "
                f"ArraySpec((4,), np.{numpy_name}) for a vector of 4."
            )
        if not (hasattr(spec, "shape") and hasattr(spec, "dtype")):
            raise SpecError(
                f"a spec leaf needs .shape and .dtype; got {type(spec).__name__}: {spec!r}. "
                "Use recollect.ArraySpec(shape, dtype)."
            )
        shape = spec.shape
        if hasattr(shape, "as_list"):  # tf.TensorShape
            try:
                shape = shape.as_list()
            except ValueError as err:  # TensorShape(None)
                raise SpecError(
                    f"spec leaf {spec!r} has an unknown rank; replay storage is "
                    "preallocated, so the shape must be fully defined."
                ) from err
        if any(d is None for d in shape):
            raise SpecError(
                f"spec leaf {spec!r} has an undefined dimension {tuple(shape)}; "
                "replay storage is preallocated, so every dimension must be known."
            )
        dtype = spec.dtype
        dtype = getattr(dtype, "as_numpy_dtype", dtype)  # tf.DType
        if type(dtype).__module__.startswith("torch"):
            dtype = str(dtype).removeprefix("torch.")
        name = name if name is not None else getattr(spec, "name", None)
        return cls(tuple(shape), dtype, name if isinstance(name, str) else None)


def _dtype_name(x: Any) -> str | None:
    """The name of ``x`` when it is a dtype alone (numpy, scalar type, string, torch), or None."""
    if isinstance(x, type | np.dtype | str):
        try:
            return np.dtype(x).name
        except TypeError:
            return None
    if type(x).__module__.startswith("torch") and type(x).__name__ == "dtype":
        try:
            np.dtype(str(x).removeprefix("torch."))
        except TypeError:
            return None
        return str(x)
    return None


def _is_spec_leaf(x: Any) -> bool:
    # np.float32 (a class) has .shape and .dtype descriptors: a dtype, not a spec
    return not isinstance(x, type) and hasattr(x, "shape") and hasattr(x, "dtype")


def _entry_name(entry: Any) -> str:
    field = getattr(entry, "field", None)
    return str(field if field is not None else entry.entry)


def leaf_paths(tree: Any, is_leaf: Any = None) -> list[str]:
    """Paths (``"observation/camera"``) of the leaves of ``tree``, in flatten order."""
    accessors = optree.tree_accessors(tree, is_leaf=is_leaf, none_is_leaf=False)
    return ["/".join(_entry_name(e) for e in acc) or "<root>" for acc in accessors]


def normalize_spec(spec: Any) -> Any:
    """Returns ``spec`` with every leaf converted to :class:`ArraySpec`.

    Raises:
        SpecError: the nest is empty or a leaf is not spec-like.
    """
    leaves, treedef = optree.tree_flatten(spec, is_leaf=_is_spec_leaf, none_is_leaf=False)
    if not leaves:
        raise SpecError("data_spec has no leaves; give at least one ArraySpec.")
    paths = leaf_paths(spec, is_leaf=_is_spec_leaf)
    converted = []
    for path, leaf in zip(paths, leaves, strict=True):
        try:
            converted.append(ArraySpec.from_spec(leaf))
        except SpecError as err:
            raise SpecError(f"data_spec leaf '{path}': {err}") from err
    return optree.tree_unflatten(treedef, converted)


class FlatSpec:
    """A normalised spec flattened once: paths, shapes and dtypes in leaf order.

    Attributes:
        spec: the nest of :class:`ArraySpec`.
        treedef: optree structure of the spec.
        paths: leaf paths, e.g. ``["action", "observation/camera"]``.
        leaves: the :class:`ArraySpec` leaves in the same order.
    """

    def __init__(self, spec: Any) -> None:
        self.spec = normalize_spec(spec)
        self.leaves: list[ArraySpec]
        self.leaves, self.treedef = optree.tree_flatten(
            self.spec, is_leaf=_is_spec_leaf, none_is_leaf=False
        )
        self.paths = leaf_paths(self.spec, is_leaf=_is_spec_leaf)
        self.shapes = [leaf.shape for leaf in self.leaves]
        self.dtypes = [leaf.dtype for leaf in self.leaves]

    def index(self, path: str) -> int:
        """Position of the leaf at ``path``.

        Raises:
            SpecError: no leaf has that path.
        """
        try:
            return self.paths.index(path)
        except ValueError:
            raise SpecError(f"no leaf '{path}' in the spec; leaves are {self.paths}.") from None

    def has_top_level(self, key: str) -> bool:
        """Whether the spec is a mapping/namedtuple with a top-level leaf ``key``."""
        return key in self.paths

    def flatten(self, tree: Any) -> list[Any]:
        """The leaves of ``tree`` (a nest with the spec's structure) in flatten order.

        Raises:
            ValueError: ``tree`` does not have the spec's structure (optree's message).
        """
        return self.treedef.flatten_up_to(tree)

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """Builds a nest like the spec from leaves in flatten order."""
        return optree.tree_unflatten(self.treedef, list(leaves))

    @property
    def nbytes(self) -> int:
        """Bytes one step occupies across all leaves."""
        return sum(leaf.nbytes for leaf in self.leaves)


#: dtypes that Python scalars in an example step take (numpy would make floats float64).
PYTHON_SCALAR_DTYPES = {
    bool: np.dtype(np.bool_),
    int: np.dtype(np.int64),
    float: np.dtype(np.float32),
}


def spec_from_example(step: Any) -> Any:
    """Infers a spec from one example step (a nest of arrays or scalars).

    Arrays and numpy scalars keep their dtype. Python scalars follow one rule,
    the dtypes RL code stores them in: ``float`` -> float32 (rewards,
    discounts), ``int`` -> int64 (discrete actions), ``bool`` -> bool (flags).
    numpy would make a Python float float64; pass ``np.float64(x)`` or an
    array to keep float64. Later values are cast to these dtypes under the
    usual rule (``same_kind`` and lossless, else an error).

    Example:
        >>> spec_from_example({"reward": 1.0, "action": 2, "done": False})
        ... # {'reward': ArraySpec((), float32), 'action': ArraySpec((), int64),
        ... #  'done': ArraySpec((), bool)}

    Raises:
        SpecError: the example has no leaves, or a leaf is not numeric.
    """
    leaves, treedef = optree.tree_flatten(step, none_is_leaf=False)
    if not leaves:
        raise SpecError("the example step has no leaves.")
    specs = []
    for leaf in leaves:
        dtype = PYTHON_SCALAR_DTYPES.get(type(leaf))
        if dtype is not None:
            specs.append(ArraySpec((), dtype))
            continue
        arr = np.asarray(leaf)
        specs.append(ArraySpec(arr.shape, arr.dtype))
    return optree.tree_unflatten(treedef, specs)


def spec_from_space(space: Any) -> Any:
    """Converts a gymnasium space into a spec (gymnasium is imported lazily).

    Box -> its shape/dtype; Discrete -> int64 scalar; MultiDiscrete -> int64
    ``nvec.shape``; MultiBinary -> int8 ``shape``; Dict -> dict; Tuple -> tuple.

    Raises:
        SpecError: the space type is not supported (e.g. Text, Graph, Sequence).
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {key: spec_from_space(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(spec_from_space(sub) for sub in space.spaces)
    if isinstance(space, spaces.Discrete):
        return ArraySpec((), space.dtype or np.int64)
    if isinstance(space, spaces.MultiDiscrete):
        return ArraySpec(space.nvec.shape, space.dtype or np.int64)
    if isinstance(space, spaces.MultiBinary):
        return ArraySpec(space.shape, space.dtype or np.int8)
    if isinstance(space, spaces.Box):
        return ArraySpec(space.shape, space.dtype)
    raise SpecError(
        f"spec_from_space does not support {type(space).__name__}; supported: Box, "
        "Discrete, MultiDiscrete, MultiBinary, Dict, Tuple. Build an ArraySpec by hand."
    )


def leaf_names(paths: Sequence[str]) -> list[str]:
    """``leaf-003-observation.camera``: index and file-safe path of each leaf (file names)."""
    return [f"leaf-{i:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '.', p)}" for i, p in enumerate(paths)]
