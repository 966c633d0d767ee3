"""recollect.tf_agents: the TF-Agents "Replay Buffers" tutorial runs with imports changed."""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect import errors  # noqa: E402
from recollect import ids as rc_ids  # noqa: E402
from recollect.tf_agents import (  # noqa: E402  (the only line changed from the tutorial)
    PyUniformReplayBuffer,
    TFUniformReplayBuffer,
    py_uniform_replay_buffer,
    tensor_spec,
    tf_uniform_replay_buffer,
)


def _tutorial_spec():
    return (
        tf.TensorSpec([3], tf.float32, "action"),
        (tf.TensorSpec([5], tf.float32, "lidar"), tf.TensorSpec([3, 2], tf.float32, "camera")),
    )


def _shapes(tree):
    return tf.nest.map_structure(lambda t: tuple(getattr(t, "shape", t)), tree)


def test_tutorial_tf_uniform_replay_buffer_prints_the_same_shapes():
    # --- tutorial code, verbatim but for the imports ---
    data_spec = (
        tf.TensorSpec([3], tf.float32, "action"),
        (tf.TensorSpec([5], tf.float32, "lidar"), tf.TensorSpec([3, 2], tf.float32, "camera")),
    )
    batch_size = 32
    max_length = 1000
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        data_spec, batch_size=batch_size, max_length=max_length
    )
    action = tf.constant(1 * np.ones(data_spec[0].shape.as_list(), dtype=np.float32))
    lidar = tf.constant(2 * np.ones(data_spec[1][0].shape.as_list(), dtype=np.float32))
    camera = tf.constant(3 * np.ones(data_spec[1][1].shape.as_list(), dtype=np.float32))
    values = (action, (lidar, camera))
    values_batched = tf.nest.map_structure(lambda t: tf.stack([t] * batch_size), values)
    replay_buffer.add_batch(values_batched)
    for _ in range(5):
        replay_buffer.add_batch(values_batched)
    sample = replay_buffer.get_next(sample_batch_size=10, num_steps=1)
    dataset = replay_buffer.as_dataset(sample_batch_size=4, num_steps=2)
    iterator = iter(dataset)
    trajectories = []
    for _ in range(3):
        t, _ = next(iterator)
        trajectories.append(t)
    iterated = tf.nest.map_structure(lambda t: t.shape, trajectories)
    trajectories = replay_buffer.gather_all()
    gathered = tf.nest.map_structure(lambda t: t.shape, trajectories)
    # --- checks ---
    assert _shapes(sample[0]) == ((10, 1, 3), ((10, 1, 5), (10, 1, 3, 2)))
    assert [_shapes(t) for t in iterated] == [((4, 2, 3), ((4, 2, 5), (4, 2, 3, 2)))] * 3
    assert _shapes(gathered) == ((32, 6, 3), ((32, 6, 5), (32, 6, 3, 2)))
    np.testing.assert_array_equal(trajectories[1][1].numpy(), 3.0)
    assert int(replay_buffer.num_frames()) == 6 * 32
    assert replay_buffer.capacity == 32_000


def test_tutorial_py_uniform_replay_buffer_with_numpy():
    data_spec = _tutorial_spec()
    replay_buffer_capacity = 1000 * 32
    py_replay_buffer = py_uniform_replay_buffer.PyUniformReplayBuffer(
        capacity=replay_buffer_capacity, data_spec=tensor_spec.to_nest_array_spec(data_spec)
    )
    values = (
        np.ones((1, 3), np.float32),
        (np.ones((1, 5), np.float32), np.ones((1, 3, 2), np.float32)),
    )
    for _ in range(6):
        py_replay_buffer.add_batch(values)
    items = py_replay_buffer.get_next(sample_batch_size=4, num_steps=2)
    assert isinstance(items[0], np.ndarray)
    assert _shapes(items) == ((4, 2, 3), ((4, 2, 5), (4, 2, 3, 2)))
    assert _shapes(py_replay_buffer.gather_all()) == ((1, 6, 3), ((1, 6, 5), (1, 6, 3, 2)))
    ds_items = next(iter(py_replay_buffer.as_dataset(sample_batch_size=4, num_steps=2)))
    assert _shapes(ds_items) == ((4, 2, 3), ((4, 2, 5), (4, 2, 3, 2)))
    assert py_replay_buffer.num_frames() == 6 == py_replay_buffer.size
    py_replay_buffer.clear()
    assert py_replay_buffer.num_frames() == 0


def _mixed_buffer(batch_size=3, max_length=8):
    Step = collections.namedtuple("Step", ["obs", "action", "flag", "h"])
    spec = Step(
        tf.TensorSpec([2], tf.float32),
        tf.TensorSpec([], tf.int32),
        tf.TensorSpec([], tf.bool),
        tf.TensorSpec([1], tf.float16),
    )
    rb = TFUniformReplayBuffer(spec, batch_size=batch_size, max_length=max_length, rng=0)

    def step(t):
        return Step(
            tf.fill([batch_size, 2], float(t)),
            tf.range(batch_size, dtype=tf.int32) + 100 * t,
            tf.zeros([batch_size], tf.bool),
            tf.zeros([batch_size, 1], tf.float16),
        )

    return rb, step


def test_get_next_dtypes_ids_and_time_unstacked():
    rb, step = _mixed_buffer()
    for t in range(4):
        rb.add_batch(step(t))
    items, info = rb.get_next(sample_batch_size=5, num_steps=2)
    assert [x.dtype for x in items] == [tf.float32, tf.int32, tf.bool, tf.float16]
    assert info.ids.shape == (5, 2) and info.ids.dtype == tf.int64
    assert info.probabilities.dtype == tf.float32
    np.testing.assert_allclose(info.probabilities.numpy(), 1 / (3 * 3))
    # consecutive steps of one row: times t, t+1; action = row + 100 * t
    a = items.action.numpy()
    np.testing.assert_array_equal(a[:, 1] - a[:, 0], 100)
    _, rows, times = rc_ids.decode(info.ids.numpy())
    np.testing.assert_array_equal(times * 100 + rows, a)
    unstacked, info2 = rb.get_next(sample_batch_size=5, num_steps=2, time_stacked=False)
    assert isinstance(unstacked, tuple) and len(unstacked) == 2
    assert unstacked[0].obs.shape == (5, 2) and len(info2.ids) == 2
    single, info3 = rb.get_next()
    assert single.obs.shape == (2,) and info3.ids.shape == ()


def test_add_batch_and_sampling_inside_tf_function():
    rb, step = _mixed_buffer()

    @tf.function
    def observer(traj):
        rb.add_batch(traj)

    for t in range(3):
        observer(step(t))
    assert int(rb.num_frames()) == 9

    dataset = rb.as_dataset(sample_batch_size=4, num_steps=2)
    iterator = iter(dataset)

    @tf.function
    def train_step():
        items, info = next(iterator)
        sampled, _ = rb.get_next(sample_batch_size=2)
        return tf.reduce_sum(items.obs) + tf.reduce_sum(sampled.obs), tf.shape(info.ids)

    total, ids_shape = train_step()
    assert ids_shape.numpy().tolist() == [4, 2]
    assert np.isfinite(total.numpy())
    gathered = tf.function(rb.gather_all)()
    assert gathered.obs.shape == (3, 3, 2)


def test_sampling_empty_raises_instead_of_garbage():
    py = PyUniformReplayBuffer((tf.TensorSpec([2], tf.float32),), capacity=10)
    with pytest.raises(errors.NotEnoughDataError, match="empty buffer"):
        py.get_next(sample_batch_size=2)
    rb, _ = _mixed_buffer()
    with pytest.raises(errors.NotEnoughDataError, match="empty buffer"):
        rb.get_next(sample_batch_size=2)


def test_num_steps_larger_than_a_row_names_the_cause():
    rb, step = _mixed_buffer(max_length=4)
    rb.add_batch(step(0))
    with pytest.raises(errors.InvalidArgumentError, match=r"num_steps=5, max_length=4"):
        rb.get_next(sample_batch_size=2, num_steps=5)
    with pytest.raises(errors.InvalidArgumentError, match=r"num_steps=5, max_length=4"):
        rb.as_dataset(sample_batch_size=2, num_steps=5)
    with pytest.raises(errors.NotEnoughDataError, match=r"Add at least 2 more step"):
        rb.get_next(sample_batch_size=2, num_steps=3)


def test_failed_add_batch_changes_nothing():
    rb, step = _mixed_buffer()
    rb.add_batch(step(0))
    bad = step(1)._replace(obs=tf.zeros([2, 2]))  # wrong batch dim
    with pytest.raises(errors.ShapeError, match="obs"):
        rb.add_batch(bad)
    bad_dtype = step(1)._replace(action=tf.fill([3], 1.5))
    with pytest.raises(errors.DTypeError, match="action"):
        rb.add_batch(bad_dtype)
    assert int(rb.num_frames()) == 3
    _, info = rb.get_next(sample_batch_size=50)
    np.testing.assert_array_equal(rc_ids.decode(info.ids.numpy())[2], 0)  # only step 0 stored

    @tf.function
    def observer(traj):
        return rb.add_batch(traj)

    with pytest.raises(tf.errors.OpError, match="obs"):
        observer(bad)
    assert int(rb.num_frames()) == 3


def test_clear_and_deterministic_pass():
    rb, step = _mixed_buffer(batch_size=2, max_length=4)
    for t in range(3):
        rb.add_batch(step(t))
    seen = [info.ids.numpy().tolist() for _, info in rb.as_dataset(single_deterministic_pass=True)]
    # TF-Agents' order: row by row, oldest first
    assert seen == rc_ids.encode([0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]).tolist()
    rb.clear()
    assert int(rb.num_frames()) == 0
    with pytest.raises(errors.NotEnoughDataError):
        rb.get_next()


@pytest.mark.parametrize("cls", ["py", "tf"])
def test_eager_and_graph_iteration_yield_the_same_element_structure(cls):
    from recollect.adapters.tf_data import eager as _tf_eager

    spec = _tutorial_spec()
    if cls == "py":
        buffer = PyUniformReplayBuffer(spec, capacity=50)
        item = tf.nest.map_structure(lambda s: np.ones(s.shape, np.float32), spec)
        for _ in range(6):
            buffer.add_batch(tf.nest.map_structure(lambda x: x[None], item))
    else:
        buffer = TFUniformReplayBuffer(spec, batch_size=2, max_length=10)
        for _ in range(6):
            buffer.add_batch(tf.nest.map_structure(lambda s: tf.ones([2, *s.shape]), spec))
    dataset = buffer.as_dataset(sample_batch_size=4, num_steps=2).prefetch(2)
    iterator = iter(dataset)
    assert isinstance(iterator, _tf_eager.EagerSampleIterator)  # the fast eager path is kept
    eager = next(iterator)
    graph = tf.function(lambda it: next(it))(iterator)
    for element in (eager, graph):
        tf.nest.assert_same_structure(element, dataset.element_spec)
        for tensor, want in zip(
            tf.nest.flatten(element), tf.nest.flatten(dataset.element_spec), strict=True
        ):
            assert want.is_compatible_with(tensor) and tensor.dtype == want.dtype
