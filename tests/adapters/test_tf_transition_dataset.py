"""recollect.tf_data.as_dataset over a TransitionBuffer: batches of transitions named as
``TransitionBuffer.sample`` names them (issue 36 item 1)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import recollect as rc  # noqa: E402
from chi_square import assert_fits  # noqa: E402
from recollect import errors  # noqa: E402
from recollect import ids as rc_ids  # noqa: E402
from recollect.adapters import tf_data  # noqa: E402

FIELDS = ["action", "next_observation", "observation", "reward", "terminated", "truncated"]


def add(buf: rc.TransitionBuffer, t: int) -> None:
    obs = np.array([t, -t], np.float32)
    buf.add(
        obs, np.int32(t % 3), t / 2, obs + np.array([1, -1], np.float32), t % 7 == 6, t % 5 == 4
    )


def filled(n: int, capacity: int = 100) -> rc.TransitionBuffer:
    """Transition t has observation [t, -t], next observation [t + 1, -t - 1] (one episode,
    chained), action t % 3 (int32), reward t / 2, terminated t % 7 == 6, truncated t % 5 == 4."""
    buf = rc.TransitionBuffer(capacity=capacity, rng=0)
    for t in range(n):
        add(buf, t)
    return buf


def check_element(items, info, stored: int) -> None:
    t = items["observation"].numpy()[:, 0]
    np.testing.assert_array_equal(items["observation"].numpy()[:, 1], -t)
    np.testing.assert_array_equal(items["next_observation"].numpy(), np.stack([t + 1, -t - 1], 1))
    np.testing.assert_array_equal(items["action"].numpy(), t.astype(int) % 3)
    np.testing.assert_array_equal(items["reward"].numpy(), t / 2)
    np.testing.assert_array_equal(items["terminated"].numpy(), t % 7 == 6)
    np.testing.assert_array_equal(items["truncated"].numpy(), t % 5 == 4)
    _, _, times = rc_ids.decode(info.ids.numpy())
    np.testing.assert_array_equal(times, t)
    np.testing.assert_allclose(info.probabilities.numpy(), 1 / stored)


def test_as_dataset_yields_transition_batches_named_as_sample_names_them():
    buf = filled(40)
    dataset = tf_data.as_dataset(buf, sample_batch_size=32)
    items, info = dataset.element_spec
    assert sorted(items) == FIELDS
    assert items["observation"] == tf.TensorSpec([32, 2], tf.float32)
    assert items["next_observation"] == tf.TensorSpec([32, 2], tf.float32)
    assert items["action"] == tf.TensorSpec([32], tf.int32)
    assert items["terminated"] == tf.TensorSpec([32], tf.bool)
    assert info.ids == tf.TensorSpec([32], tf.int64)
    for items, info in dataset.take(3):
        check_element(items, info, 40)


def test_as_dataset_of_a_transition_buffer_runs_in_a_tf_function_pipeline():
    buf = filled(40)
    dataset = tf_data.as_dataset(buf, sample_batch_size=8).map(lambda items, info: (items, info))
    iterator = iter(dataset)

    @tf.function
    def step(it):
        return next(it)

    for _ in range(3):
        items, info = step(iterator)
        check_element(items, info, 40)


def test_as_dataset_samples_uniformly_and_sees_later_appends():
    buf = filled(10)
    iterator = iter(tf_data.as_dataset(buf, sample_batch_size=50))

    def counts() -> np.ndarray:
        items, info = next(iterator)
        check_element(items, info, 10)
        return np.bincount(items["observation"].numpy()[:, 0].astype(int), minlength=10)

    assert_fits(lambda: sum(counts() for _ in range(8)))
    for t in range(10, 20):
        add(buf, t)
    items, info = next(iterator)
    check_element(items, info, 20)


def test_as_dataset_of_a_transition_buffer_rejects_windows_and_an_empty_buffer():
    with pytest.raises(
        errors.InvalidArgumentError, match="num_steps must be None; got num_steps=2"
    ):
        tf_data.as_dataset(filled(5), sample_batch_size=4, num_steps=2)
    with pytest.raises(errors.NotEnoughDataError, match="TransitionBuffer is empty"):
        tf_data.as_dataset(rc.TransitionBuffer(capacity=8), sample_batch_size=4)
