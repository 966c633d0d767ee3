"""What a sample returns: data and metadata kept apart (Reverb: ``ReplaySample``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import optree

__all__ = ["BufferInfo", "Sample", "nest_repr"]


class _Summary:
    """Prints as ``float32[64, 2, 4]`` inside a nest's repr."""

    def __init__(self, x: Any) -> None:
        self.text = f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"

    def __repr__(self) -> str:
        return self.text


def _summarize(value: Any) -> Any:
    def leaf(x: Any) -> Any:
        return _Summary(x) if hasattr(x, "shape") and hasattr(x, "dtype") else x

    return optree.tree_map(leaf, value, none_is_leaf=True)


def nest_repr(obj: Any, fields: Iterable[str] | None = None) -> str:
    """``Name(field=float32[64, 2, 4], ...)``: shapes and dtypes of array leaves, not values.

    Args:
        obj: the object (e.g. a :class:`Sample` or a ``TransitionSample``).
        fields: attribute names to show, in order; default: its dataclass fields.
    """
    names = [f.name for f in dataclasses.fields(obj)] if fields is None else list(fields)
    parts = ", ".join(f"{name}={_summarize(getattr(obj, name))!r}" for name in names)
    return f"{type(obj).__name__}({parts})"


def _data_names(data: Any) -> list[str]:
    if isinstance(data, Mapping):
        return sorted(map(str, data))
    return list(getattr(data, "_fields", ()))


def _lookup(data: Any, key: Any) -> Any:
    """``data[key]``; a namedtuple field name, or a ``"a/b"`` leaf path into nested mappings."""
    if isinstance(key, str) and not isinstance(data, Mapping) and key in _data_names(data):
        return getattr(data, key)
    try:
        return data[key]
    except (KeyError, IndexError, TypeError):
        if not (isinstance(key, str) and "/" in key):
            raise
    node = data
    for part in key.split("/"):
        node = _lookup(node, part)
    return node


class BufferInfo(NamedTuple):
    """TF-Agents style sample metadata.

    Attributes:
        ids: int64 ``[B]`` id of each window's first step.
        probabilities: float64 ``[B]`` probability with which each window was drawn.
    """

    ids: np.ndarray
    # () in TF-Agents' single deterministic pass, which draws no probabilities
    probabilities: np.ndarray | tuple[()]


@dataclasses.dataclass(frozen=True)
class Sample:
    """A batch of windows.

    ``s["observation"]`` and ``s.observation`` read ``s.data["observation"]``
    (dict or namedtuple data); metadata fields keep their names (``s.ids`` is
    always the ids, ``s["ids"]`` a data leaf called ``ids``). The repr shows
    shapes and dtypes, not values.

    Attributes:
        data: nest like the spec; leaves ``[B, num_steps, *leaf_shape]``
            (``[B, *leaf_shape]`` when sampled with ``num_steps=None``).
        ids: int64 ``[B]`` id of each window's first step; unique for the
            buffer's lifetime (``recollect.ids.decode(ids)`` gives ``(shard, row, row time)``).
        probabilities: float64 ``[B]`` probability with which each window was drawn.
        weights: float64 ``[B]`` importance weights normalised by their max
            (prioritized sampling), else None; computed from ``probabilities``
            and ``table_size`` (:func:`recollect.samplers.importance_weights`).
        priorities: float64 ``[B]`` priority of each window (1.0 without priorities).
        times_sampled: int32 ``[B]`` times each window was returned, this sample included
            (buffers built with ``track_times_sampled=True``), else None.
        table_size: number of valid windows the batch was drawn among.
    """

    data: Any
    ids: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None
    priorities: np.ndarray | None = None
    times_sampled: np.ndarray | None = None
    table_size: int = 0

    @property
    def info(self) -> BufferInfo:
        """``BufferInfo(ids, probabilities)`` as TF-Agents returns it."""
        return BufferInfo(self.ids, self.probabilities)

    def __getitem__(self, key: Any) -> Any:
        """``s["observation"]`` is ``s.data["observation"]`` (also a leaf path ``"obs/camera"``,
        a namedtuple field or a tuple index).

        Raises:
            KeyError: no such data leaf (the message lists the data keys).
        """
        try:
            return _lookup(self.data, key)
        except (KeyError, IndexError, TypeError, AttributeError):
            raise KeyError(
                f"Sample has no data leaf {key!r}; data keys: {_data_names(self.data)}."
            ) from None

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: metadata fields (ids, ...) always win;
        # ``s["ids"]`` reads a data leaf of that name.
        data = vars(self).get("data")
        if not name.startswith("_") and name in _data_names(data):
            return _lookup(data, name)
        raise AttributeError(
            f"Sample has no attribute {name!r}; fields: "
            f"{[f.name for f in dataclasses.fields(self)]}, data keys: {_data_names(data)}."
        )

    def __repr__(self) -> str:
        return nest_repr(self)
