"""A writer stream's columns and the references ``append`` returns for their values.

A :class:`StreamColumn` is one flattened leaf path of a writer: its dtype and shape
(set by its first value), its step counter, the values not yet sent and the first
step still alive. A :class:`CellRef` names one appended value (column and step).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, SpecError
from recollect.reverb import signature as _signature

PLAIN_KINDS = frozenset("biufc")


def to_array(value: Any) -> np.ndarray:
    """A value as the array Reverb stores: str and bytes become object arrays of bytes."""
    if type(value) is np.ndarray and value.dtype.kind in PLAIN_KINDS:
        return value
    array = np.asarray(value)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8").astype(object)
    if array.dtype.kind == "S":
        return array.astype(object)
    if array.dtype.kind == "O":
        flat = [v.encode("utf-8") if isinstance(v, str) else v for v in array.reshape(-1)]
        out = np.empty(array.shape, object)
        out.reshape(-1)[:] = flat
        return out
    return array


class CellRef:
    """A reference to one appended value of one column (Reverb's ``WeakCellRef``)."""

    __slots__ = ("_column", "_value", "step")

    def __init__(self, column: StreamColumn, step: int, value: np.ndarray | None) -> None:
        # value None: a reference made by the legacy ``Writer.create_item``, which
        # only reads its column and step
        self._column = column
        self.step = step
        self._value = value

    @property
    def column(self) -> int:
        return self._column.index

    @property
    def owner(self) -> StreamColumn:
        """The column history the value was appended to."""
        return self._column

    @property
    def expired(self) -> bool:
        return self.step < self._column.alive_from

    @property
    def shape(self) -> tuple[int, ...]:
        return self.numpy().shape

    @property
    def dtype(self) -> np.dtype:
        return self.numpy().dtype

    def numpy(self) -> np.ndarray:
        if self._value is None:
            raise InvalidArgumentError(
                f"{self!r} was made by Writer.create_item and holds no value; read values "
                "through the CellRefs TrajectoryWriter.append returns."
            )
        if type(self._value) is not np.ndarray:  # a numpy scalar, kept as appended
            self._value = np.asarray(self._value)
        return self._value

    def __repr__(self) -> str:
        return f"CellRef(column={self.column}, step={self.step}, expired={self.expired})"


@dataclass
class StreamColumn:
    stream: Any  # its WriterStream
    index: int
    keep: int
    dtype: np.dtype | None = None
    shape: tuple[int, ...] | None = None
    next_step: int = 0
    sent: int = 0  # steps already sent
    alive_from: int = 0
    unsent: list[Any] = field(default_factory=list)  # arrays, or numpy scalars
    kind: type | None = None  # the type of the first value (ndarray or a numpy scalar type)

    def admit(self, value: Any) -> Any:
        """``value`` checked against the column (the first value sets dtype, shape and
        ``kind``): a plain-dtype array copied, a numpy scalar as is, else :func:`to_array`'s."""
        kind = type(value)
        array = to_array(value)
        if array.dtype != self.dtype or array.shape != self.shape:
            self.check(array)
        if self.kind is None and array.dtype.kind in PLAIN_KINDS:
            if kind is np.ndarray or issubclass(kind, np.generic):
                self.kind = kind
                self.stream.kinds_changed()
        if isinstance(value, np.generic) and array.dtype.kind in PLAIN_KINDS:
            return value  # immutable
        if isinstance(value, np.ndarray):
            return np.array(array, copy=True)  # the caller may reuse its array
        return array  # made from a list, str, bytes or Python scalar: already new

    def check(self, value: np.ndarray) -> None:
        if self.dtype is None or self.shape is None:  # set together, by the first value
            self.dtype, self.shape = value.dtype, value.shape
            return
        if value.dtype == self.dtype and value.shape == self.shape:
            return
        if _signature.dtype_name(value.dtype) != _signature.dtype_name(self.dtype):
            raise SpecError(
                f"Tensor of wrong dtype provided for column {self.index}. Got "
                f"{_signature.dtype_name(value.dtype)} but expected "
                f"{_signature.dtype_name(self.dtype)}. Hint: a column keeps the dtype of its "
                f"first value ({self.dtype}); cast the value (got {value.dtype})."
            )
        if value.shape != self.shape:
            raise SpecError(
                f"Tensor of incompatible shape provided for column {self.index}. Got "
                f"{_signature.shape_text(value.shape)} which is incompatible with "
                f"{_signature.shape_text(self.shape)}. Hint: a column keeps the shape of its "
                "first value; reshape or use another field name."
            )
