"""The base of the Reverb dataset classes built over an inner tf.data pipeline."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["WrappedDataset"]


class WrappedDataset(tf.compat.v1.data.Dataset):
    """The base of the Reverb dataset classes built over an inner tf.data pipeline
    (:class:`TrajectoryDataset`, :class:`~recollect.reverb.pattern_dataset.PatternDataset`):
    its elements are those of ``inner``, its element spec ``tf.TensorSpec`` of ``shapes``
    and ``dtypes`` (nests of one structure)."""

    def __init__(self, inner: tf.data.Dataset, shapes: Any, dtypes: Any) -> None:
        self._inner = inner
        self._shapes = shapes
        self._dtypes = dtypes
        super().__init__()

    def _as_variant_tensor(self) -> Any:
        return self._inner._variant_tensor

    def _inputs(self) -> list[Any]:
        return []

    @property
    def element_spec(self) -> Any:
        return tf.nest.map_structure(tf.TensorSpec, self._shapes, self._dtypes)
