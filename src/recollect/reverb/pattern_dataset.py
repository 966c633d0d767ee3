"""Reverb's ``PatternDataset``: structured-writer patterns applied to a dataset of steps.

``reverb.PatternDataset(input_dataset, configs, respect_episode_boundaries,
is_end_of_episode)`` yields the trajectories a
:class:`~recollect.reverb.structured_writer.StructuredWriter` with ``configs``
would insert if it were given the steps of ``input_dataset`` one by one (an
``end_episode`` after each step ``is_end_of_episode`` says ends one; with
``respect_episode_boundaries=False`` trajectories may span episodes). No server
is involved: the same :class:`~recollect.reverb.pattern_engine.PatternEngine`
runs over the step arrays. Needs TensorFlow and eager mode, as Reverb's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from recollect.errors import InvalidArgumentError
from recollect.reverb import structured_writer
from recollect.reverb.pattern_engine import Item, PatternEngine
from recollect.reverb.replay_sample import ReplaySample, SampleInfo
from recollect.reverb.wrapped_dataset import WrappedDataset

__all__ = ["PatternDataset", "pattern_dataset_with_info"]


def _column(cells: list[np.ndarray], squeeze: bool) -> np.ndarray:
    return cells[0] if squeeze else np.stack(cells)


class PatternDataset(WrappedDataset):
    """A ``tf.data.Dataset`` of the trajectories ``configs`` make from ``input_dataset``.

    Args:
        input_dataset: a dataset of single steps (flatten a dataset of episodes first).
        configs: ``structured_writer.create_config`` results; their tables are ignored.
        respect_episode_boundaries: True: no trajectory spans two episodes.
        is_end_of_episode: step -> scalar bool tensor, True on an episode's last step.

    Elements are nests shaped like the configs' pattern, with the shapes and dtypes
    ``structured_writer.infer_signature(configs, input_dataset.element_spec)`` gives.

    Raises:
        InvalidArgumentError (a ValueError): no configs, an invalid config, configs that
            disagree (see ``infer_signature``), or an ``is_end_of_episode`` that does not
            return a scalar bool.
    """

    def __init__(
        self,
        input_dataset: tf.data.Dataset,
        configs: Sequence[Any],
        respect_episode_boundaries: bool,
        is_end_of_episode: Callable[[Any], Any],
    ) -> None:
        signature = structured_writer.infer_signature(configs, input_dataset.element_spec)
        PatternEngine(configs, np.asarray)  # checks the configs now, not at the first step
        shapes = tf.nest.map_structure(lambda s: s.shape, signature)
        dtypes = tf.nest.map_structure(lambda s: s.dtype, signature)
        is_end = tf.function(is_end_of_episode)
        output = is_end.get_concrete_function(input_dataset.element_spec).structured_outputs
        if not (
            isinstance(output, tf.Tensor)
            and output.dtype == tf.bool
            and output.shape.is_compatible_with([])
        ):
            raise InvalidArgumentError(
                "Invalid `is_end_of_episode`. `is_end_of_episode` must return `bool`, but its "
                f"return type is {tf.nest.map_structure(_spec_of, output)}. Return a scalar "
                "bool tensor (e.g. `lambda step: step['is_last']`)."
            )
        element_spec = tf.nest.map_structure(tf.TensorSpec, shapes, dtypes)
        configs = list(configs)

        def steps() -> Iterator[Any]:
            engine = PatternEngine(configs, np.asarray)
            for step in input_dataset:
                flat = [np.asarray(x) for x in tf.nest.flatten(step)]
                items: list[Item] = engine.record(engine.used(flat), False)
                if bool(is_end(step)):
                    items += engine.end_episode_items()
                    engine.new_episode(respect_episode_boundaries)
                for item in items:
                    columns = [
                        _column(c, s) for c, s in zip(item.columns, item.squeeze, strict=True)
                    ]
                    yield tf.nest.pack_sequence_as(element_spec, columns)

        inner = tf.data.Dataset.from_generator(steps, output_signature=element_spec)
        super().__init__(inner, shapes, dtypes)


def _spec_of(x: Any) -> Any:
    return tf.TensorSpec(x.shape, x.dtype) if isinstance(x, tf.Tensor) else x


def pattern_dataset_with_info(
    input_dataset: tf.data.Dataset,
    configs: Sequence[Any],
    respect_episode_boundaries: bool,
    is_end_of_episode: Callable[[Any], Any],
) -> tf.data.Dataset:
    """:class:`PatternDataset` elements as ``ReplaySample(SampleInfo.zeros(), data)``."""
    dataset = PatternDataset(input_dataset, configs, respect_episode_boundaries, is_end_of_episode)
    return dataset.map(lambda data: ReplaySample(info=SampleInfo.zeros(), data=data))
