"""Datasets of recollect.tf_agents see every step added before an element is asked for.

TF-Agents' TFUniformReplayBuffer samples each element when it is asked for
(its tests check that after the i-th add of one step per row each sampled item
has probability ``1 / (i * batch_size)``). Here the same holds in every
pipeline shape: eager, chained ``map``/``filter``/``with_options``, inside a
``tf.function``, for small (inline) and large (prefetched) elements.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect.tf_agents import TFUniformReplayBuffer  # noqa: E402

BATCH_SIZE = 2
SAMPLE = 64

PIPELINES = {
    "plain": lambda ds: ds,
    "map": lambda ds: ds.map(lambda items, info: (items, info)),
    "filter": lambda ds: ds.filter(lambda items, info: True),
    "with_options": lambda ds: ds.with_options(tf.data.Options()),
    "map_map": lambda ds: ds.map(lambda items, info: (items, info)).map(lambda i, b: (i, b)),
}


def _buffer(width):
    spec = {"obs": tf.TensorSpec([width], tf.float32), "t": tf.TensorSpec([], tf.int64)}
    return TFUniformReplayBuffer(spec, BATCH_SIZE, 1000)


def _add(rb, t, width):
    rb.add_batch(
        {
            "obs": tf.fill([BATCH_SIZE, width], float(t)),
            "t": tf.fill([BATCH_SIZE], tf.cast(t, tf.int64)),
        }
    )


@pytest.mark.parametrize("width", [1, 2048], ids=["inline", "prefetched"])
@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_each_element_after_an_add_is_drawn_from_the_grown_table(pipeline, width):
    rb = _buffer(width)
    _add(rb, 0, width)
    iterator = iter(PIPELINES[pipeline](rb.as_dataset(sample_batch_size=SAMPLE)))
    for _ in range(70):  # a read-only phase: chunks and prefetching grow
        next(iterator)
    for i in range(2, 40):
        _add(rb, i - 1, width)
        items, info = next(iterator)
        np.testing.assert_allclose(info.probabilities.numpy(), 1 / (i * BATCH_SIZE), rtol=1e-6)
        assert items["t"].numpy().max() <= i - 1


@pytest.mark.parametrize("pipeline", ["plain", "map", "filter"])
def test_inside_tf_function_each_element_after_an_add_is_fresh(pipeline):
    rb = _buffer(1)
    _add(rb, 0, 1)
    iterator = iter(PIPELINES[pipeline](rb.as_dataset(sample_batch_size=SAMPLE, num_steps=None)))

    @tf.function
    def probability():
        _, info = next(iterator)
        return info.probabilities[0]

    for _ in range(70):
        probability()
    for i in range(2, 40):
        _add(rb, i - 1, 1)
        np.testing.assert_allclose(probability().numpy(), 1 / (i * BATCH_SIZE), rtol=1e-6)


def test_adds_inside_tf_function_are_seen_by_the_next_element():
    rb = _buffer(1)
    _add(rb, 0, 1)
    _add(rb, 1, 1)
    iterator = iter(rb.as_dataset(sample_batch_size=SAMPLE, num_steps=2).map(lambda i, b: (i, b)))

    @tf.function
    def collect(t):  # a driver's observer; TensorFlow does not order it before a
        # next(iterator) in the same tf.function (no shared resource), as with TF-Agents
        return rb.add_batch({"obs": tf.fill([BATCH_SIZE, 1], 1.0), "t": tf.fill([BATCH_SIZE], t)})

    @tf.function
    def train():
        _, info = next(iterator)
        return info.probabilities[0]

    for _ in range(70):
        train()
    for i in range(3, 30):
        collect(tf.constant(i, tf.int64))
        p = train().numpy()
        # i steps per row: i - 1 windows of 2 steps per row
        np.testing.assert_allclose(p, 1 / ((i - 1) * BATCH_SIZE), rtol=1e-6)


def test_prefetch_and_parallel_calls_hold_at_most_what_the_user_asked_for():
    rb = _buffer(1)
    _add(rb, 0, 1)
    dataset = rb.as_dataset(sample_batch_size=SAMPLE, num_parallel_calls=2).prefetch(2)
    iterator = iter(dataset.map(lambda items, info: (items, info)))
    for _ in range(70):
        next(iterator)
    held = 2 + 2  # prefetch(2) and two parallel calls
    for i in range(2, 40):
        _add(rb, i - 1, 1)
        _, info = next(iterator)
        steps_per_row = 1 / (info.probabilities.numpy()[0] * BATCH_SIZE)
        # an element the map/prefetch holds may predate a few adds, never a chunk of 64
        assert steps_per_row >= i - held - 0.5
