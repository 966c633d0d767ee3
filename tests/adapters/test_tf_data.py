"""recollect.tf_data: as_dataset element specs, deterministic pass, keras, tf.function, closing."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from image_ids import assert_window_pixels_match_ids, image_buffer_with_id_pixels  # noqa: E402
from recollect import ArraySpec, ReplayBuffer, errors  # noqa: E402
from recollect import ids as rc_ids  # noqa: E402
from recollect.adapters import tf_data  # noqa: E402
from recollect.adapters.prefetch import sample_concurrent  # noqa: E402
from recollect.adapters.tf_data import eager as _tf_eager  # noqa: E402
from recollect.buffers.sampling import BufferReader  # noqa: E402
from reference import window_ids  # noqa: E402

NUM_ENVS = 3

SPEC = {
    "obs": ArraySpec((2, 3), np.float32),
    "action": ArraySpec((), np.int32),
    "pixels": ArraySpec((4,), np.uint8),
    "h": ArraySpec((1,), np.float16),
    "is_last": ArraySpec((), bool),
}


def _step(t, is_last=None):
    """Step t of every row: obs = t, action = 1000 * row + t."""
    rows = np.arange(NUM_ENVS)
    return {
        "obs": np.full((NUM_ENVS, 2, 3), t, np.float32),
        "action": (1000 * rows + t).astype(np.int32),
        "pixels": np.full((NUM_ENVS, 4), t % 256, np.uint8),
        "h": np.ones((NUM_ENVS, 1), np.float16),
        "is_last": np.zeros(NUM_ENVS, bool) if is_last is None else np.asarray(is_last),
    }


def _filled(steps=12, capacity=30, ends=()):
    buf = ReplayBuffer(SPEC, capacity, num_envs=NUM_ENVS, rng=0)
    for t in range(steps):
        buf.add_batch(_step(t, [(t, r) in ends for r in range(NUM_ENVS)]))
    return buf


@pytest.fixture(scope="module")
def buf():
    return _filled()


@pytest.mark.parametrize(("batch", "steps"), [(4, 2), (4, None), (None, 3), (None, None)])
def test_element_spec_is_static_and_matches_the_data_spec(buf, batch, steps):
    ds = tf_data.as_dataset(buf, sample_batch_size=batch, num_steps=steps)
    items, info = ds.element_spec
    outer = [d for d in (batch, steps) if d is not None]
    for key, leaf in SPEC.items():
        assert items[key].shape.as_list() == [*outer, *leaf.shape]
        assert items[key].dtype.as_numpy_dtype == leaf.dtype
    assert info.ids.dtype == tf.int64 and info.probabilities.dtype == tf.float64
    assert info.ids.shape.as_list() == ([] if batch is None else [batch])
    got, _ = next(iter(ds))
    for key in SPEC:
        assert got[key].shape.as_list() == items[key].shape.as_list()


def test_samples_are_consistent_windows(buf):
    items, info = next(iter(tf_data.as_dataset(buf, sample_batch_size=64, num_steps=3)))
    ids = info.ids.numpy()
    _, rows, times = rc_ids.decode(ids)
    expected_action = 1000 * rows[:, None] + times[:, None] + np.arange(3)
    np.testing.assert_array_equal(items["action"].numpy(), expected_action)
    np.testing.assert_array_equal(items["obs"].numpy()[:, :, 0, 0], times[:, None] + np.arange(3))
    np.testing.assert_allclose(info.probabilities.numpy(), 1 / (NUM_ENVS * (10 - 3 + 1)))


def test_single_deterministic_pass_visits_every_window_once_in_order():
    buf = _filled(steps=14, ends={(3, 0), (5, 1), (12, 2)})  # ring wrapped: steps 4..13 stored
    for n, batch in [(2, 4), (3, None), (1, 5)]:
        ds = tf_data.as_dataset(
            buf, sample_batch_size=batch, num_steps=n, single_deterministic_pass=True
        )
        ids = np.concatenate([np.atleast_1d(info.ids.numpy()) for _, info in ds]).tolist()
        is_last, lo = (
            buf.gather_all()["is_last"],
            int(rc_ids.decode(buf.reader.item_ids()[0, 0])[2]),
        )
        assert ids == window_ids(is_last, lo, n, True).tolist()
    ds = tf_data.as_dataset(buf, sample_batch_size=4, num_steps=2, single_deterministic_pass=True)
    assert ds.element_spec[0]["obs"].shape.as_list() == [None, 2, 2, 3]
    items, info = next(iter(ds))
    times = rc_ids.decode(info.ids.numpy())[2]
    np.testing.assert_array_equal(items["obs"].numpy()[:, 0, 0, 0], times)


def test_deterministic_pass_raises_when_windows_were_overwritten():
    buf = _filled()
    it = iter(
        tf_data.as_dataset(buf, sample_batch_size=2, num_steps=2, single_deterministic_pass=True)
    )
    next(it)
    for t in range(12, 30):
        buf.add_batch(_step(t))
    with pytest.raises(tf.errors.OpError, match="overwritten or cleared"):
        for _ in it:
            pass


def test_bad_arguments_raise_eagerly(buf):
    with pytest.raises(errors.InvalidArgumentError, match=r"num_steps=11, max_length=10"):
        tf_data.as_dataset(buf, sample_batch_size=2, num_steps=11)
    with pytest.raises(errors.InvalidArgumentError, match="sample_batch_size"):
        tf_data.as_dataset(buf, sample_batch_size=0)
    with pytest.raises(errors.InvalidArgumentError, match="batch_size"):
        tf_data.input_fn(buf, None, 2)


def test_empty_buffer_raises_instead_of_yielding_zeros():
    empty = ReplayBuffer(SPEC, 30, num_envs=NUM_ENVS)
    with pytest.raises(tf.errors.OpError, match="empty buffer"):
        next(iter(tf_data.as_dataset(empty, sample_batch_size=2)))


def test_iteration_stops_cleanly_when_the_buffer_is_closed():
    local = _filled()
    it = iter(tf_data.as_dataset(local, sample_batch_size=2, num_steps=2, num_parallel_calls=2))
    next(it)
    local.close()
    remaining = sum(1 for _ in it)  # at most the chunks already in flight (2 calls + 1)
    assert remaining <= 3 * tf_data.MAX_CHUNK
    assert local.closed


def test_parallel_calls_gather_outside_the_lock(monkeypatch):
    local = _filled()
    owned = []
    original = BufferReader.gather

    def spy(self, draw):
        owned.append(self.table.lock._is_owned())
        return original(self, draw)

    monkeypatch.setattr(BufferReader, "gather", spy)
    sample_concurrent(local, 8, 2)
    assert owned == [False]
    dataset = tf_data.as_dataset(local, sample_batch_size=8, num_steps=2, num_parallel_calls=4)
    items, _ = next(iter(dataset))
    assert items["obs"].shape == (8, 2, 2, 3)


def test_parallel_sampling_with_a_concurrent_writer_stays_consistent():
    local = _filled(capacity=15)  # 5 steps per row: overwrites happen constantly
    stop = threading.Event()

    def writer():
        t = 12
        while not stop.is_set():
            local.add_batch(_step(t))
            t += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        ds = tf_data.as_dataset(local, sample_batch_size=16, num_steps=3, num_parallel_calls=4)
        for items, info in ds.take(40):
            _, rows, times = rc_ids.decode(info.ids.numpy())
            expected = 1000 * rows[:, None] + times[:, None] + np.arange(3)
            np.testing.assert_array_equal(items["action"].numpy(), expected)
    finally:
        stop.set()
        thread.join()


def test_keras_model_fit_trains_on_the_dataset(buf):
    keras = pytest.importorskip("keras")

    def to_xy(items, info):
        x = tf.reshape(items["obs"], [-1, 6])
        return x, tf.cast(items["action"] % 1000, tf.float32)

    ds = tf_data.as_dataset(buf, sample_batch_size=16).map(to_xy)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][-1])


def test_dataset_inside_a_tf_function_training_step(buf):
    iterator = iter(tf_data.as_dataset(buf, sample_batch_size=8, num_steps=2, num_parallel_calls=2))
    weights = tf.Variable(tf.zeros([3]))

    @tf.function
    def train_step():
        items, info = next(iterator)
        x = tf.reduce_mean(items["obs"], axis=[1, 2])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.linalg.matvec(x, weights) - 1.0))
        weights.assign_sub(0.01 * tape.gradient(loss, weights))
        return loss, tf.shape(info.ids)

    loss, shape = train_step()
    train_step()
    assert shape.numpy().tolist() == [8] and np.isfinite(loss.numpy())


def test_input_fn_builds_per_replica_datasets(buf):
    fn = tf_data.input_fn(buf, 8, 2)
    items, _ = next(iter(fn()))
    assert items["obs"].shape == (8, 2, 2, 3)
    ctx = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    assert fn(ctx).element_spec[0]["obs"].shape.as_list() == [4, 2, 2, 3]


def test_kept_batches_are_never_overwritten_by_later_samples():
    """Large gathers may recycle output memory; a batch held as tensors must keep its values."""
    big = image_buffer_with_id_pixels()
    it = iter(tf_data.as_dataset(big, sample_batch_size=32, num_steps=2, num_parallel_calls=2))
    kept = [next(it) for _ in range(12)]
    for items, info in kept:
        assert_window_pixels_match_ids(items["obs"].numpy(), info.ids.numpy())


def test_graph_pipeline_batches_kept_as_slices_of_a_chunk_keep_their_values():
    """The pipeline's elements share their chunk's (recycled) gather memory; held ones stay put."""
    big = image_buffer_with_id_pixels()
    dataset = tf_data.as_dataset(big, sample_batch_size=32, num_steps=2, num_parallel_calls=2)
    it = iter(dataset.map(lambda items, info: (items, info)))  # the plain pipeline
    kept = [next(it) for _ in range(40)]  # several chunks, so gather blocks get reused
    for items, info in kept:
        assert_window_pixels_match_ids(items["obs"].numpy(), info.ids.numpy())


def test_eager_iteration_takes_the_python_path_with_the_element_spec(buf):
    ds = tf_data.as_dataset(buf, sample_batch_size=4, num_steps=2).prefetch(2)
    it = iter(ds)
    assert isinstance(it, _tf_eager.EagerSampleIterator)  # prefetch keeps the fast eager iterator
    element = next(it)
    tf.nest.assert_same_structure(element, ds.element_spec)
    for tensor, spec in zip(
        tf.nest.flatten(element), tf.nest.flatten(ds.element_spec), strict=True
    ):
        assert spec.is_compatible_with(tensor)
    assert not isinstance(iter(ds.map(lambda items, info: info.ids)), _tf_eager.EagerSampleIterator)


def test_the_fast_iterator_inside_a_tf_function_uses_the_pipeline(buf):
    it = iter(tf_data.as_dataset(buf, sample_batch_size=4, num_steps=2))
    eager_items, _ = next(it)

    @tf.function
    def two_batches(iterator):
        return [next(iterator)[1].ids for _ in range(2)]

    ids = two_batches(it)
    items, info = next(it)  # eager again afterwards
    stored = set(buf.reader.item_ids().reshape(-1).tolist())
    for batch_ids in [*ids, info.ids]:
        assert batch_ids.shape == (4,) and set(batch_ids.numpy().tolist()) <= stored
    assert items["obs"].dtype == eager_items["obs"].dtype == tf.float32


def test_eager_elements_follow_the_sequence_of_buf_sample():
    reference, local = _filled(), _filled()
    expected = [reference.sample(5, 2) for _ in range(20)]
    it = iter(tf_data.as_dataset(local, sample_batch_size=5, num_steps=2))
    for want in expected:
        items, info = next(it)
        np.testing.assert_array_equal(info.ids.numpy(), want.ids)
        np.testing.assert_array_equal(info.probabilities.numpy(), want.probabilities)
        np.testing.assert_array_equal(items["obs"].numpy(), want.data["obs"])


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from([np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64, bool]),
    shape=st.lists(st.integers(0, 5), max_size=3),
    offset=st.integers(0, 15),
    stride=st.sampled_from([1, 2]),
)
def test_arrays_become_equal_tensors_whatever_their_alignment(dtype, shape, offset, stride):
    size = int(np.prod(shape)) * stride
    raw = np.arange(size + offset + 64).astype(dtype)
    x = raw[offset : offset + size][::stride].reshape(shape)
    tensor = _tf_eager.as_tensor(x)
    assert tensor.dtype.as_numpy_dtype == np.dtype(dtype) and tensor.shape == x.shape
    np.testing.assert_array_equal(tensor.numpy(), x)


def test_without_the_eager_fast_path_the_plain_pipeline_serves(monkeypatch):
    monkeypatch.setattr(tf_data, "_tf_eager", None)
    local = _filled()
    ds = tf_data.as_dataset(local, sample_batch_size=4, num_steps=2)
    assert not isinstance(ds, _tf_eager.SampledDataset)
    items, info = next(iter(tf_data.map_element(ds, lambda items, info: (items, info))))
    assert items["obs"].shape == (4, 2, 2, 3) and info.ids.shape == (4,)
    local.close()


@pytest.mark.parametrize("single_deterministic_pass", [False, True])
def test_a_fixed_sequence_length_gives_the_time_axis_as_sample_does(single_deterministic_pass):
    spec = {"x": ArraySpec((2,), np.float32)}
    local = ReplayBuffer(spec, 40, num_envs=2, rng=0, sequence_length=3)
    for t in range(10):
        local.add_batch({"x": np.full((2, 2), t, np.float32)})
    assert local.sample(4).data["x"].shape == (4, 3, 2)
    ds = tf_data.as_dataset(
        local, sample_batch_size=4, single_deterministic_pass=single_deterministic_pass
    )
    assert ds.element_spec[0]["x"].shape.as_list()[1:] == [3, 2]
    items, _ = next(iter(ds))
    x = items["x"].numpy()
    assert x.shape == (4, 3, 2)
    np.testing.assert_array_equal(np.diff(x[..., 0], axis=1), 1.0)  # consecutive steps
    local.close()


def _graph_elements(dataset, count):
    """``count`` elements of ``dataset`` pulled by a ``tf.function`` (the tf.data pipeline)."""
    iterator = iter(dataset)

    @tf.function
    def pull():
        return [next(iterator) for _ in range(count)]

    return pull()


@pytest.mark.parametrize(("batch", "steps"), [(5, 2), (4, None), (None, 3)])
def test_graph_pipeline_elements_are_one_seeded_chunk_sample_split_in_order(batch, steps):
    """Inside a tf.function a chunk of elements is one draw: ``buf.sample(k * batch)`` split."""
    reference, local = _filled(), _filled()
    dataset = tf_data.as_dataset(local, sample_batch_size=batch, num_steps=steps)
    chunk = tf_data.MAX_CHUNK  # the elements are far below CHUNK_BYTES: full chunks
    want = reference.sample(chunk * (batch or 1), steps)
    got = _graph_elements(dataset, chunk)
    split = (chunk, batch) if batch is not None else (chunk,)
    for k, (items, info) in enumerate(got):
        ids = want.ids.reshape(split)[k]
        np.testing.assert_array_equal(info.ids.numpy(), ids)
        np.testing.assert_array_equal(
            info.probabilities.numpy(), want.probabilities.reshape(split)[k]
        )
        for name, leaf in items.items():
            expected = want.data[name].reshape((*split, *want.data[name].shape[1:]))[k]
            np.testing.assert_array_equal(leaf.numpy(), expected)


def test_a_rate_limited_buffer_draws_smaller_chunks_in_the_pipeline():
    """A chunk is one draw the rate limiter gates as a whole; with one the chunks stay small."""
    from recollect import MinSize

    local = ReplayBuffer(SPEC, 3000, num_envs=NUM_ENVS, rng=0, rate_limiter=MinSize(1))
    free = _filled()
    for t in range(12):
        local.add_batch(_step(t))
    sizes = []
    for buf_ in (local, free):
        drawn = []
        original = buf_.table.draw

        def draw(batch_size, *args, original=original, drawn=drawn, **kwargs):
            drawn.append(batch_size)
            return original(batch_size, *args, **kwargs)

        buf_.table.draw = draw
        # chunks double while nothing is written: 1, 2, 4, ... up to the cap
        _graph_elements(tf_data.as_dataset(buf_, sample_batch_size=2, num_steps=2), 130)
        sizes.append(max(drawn))
    assert sizes == [2 * tf_data.RATE_LIMITED_MAX_CHUNK, 2 * tf_data.MAX_CHUNK]


@pytest.fixture(params=["inline", "prefetched"])
def eager_mode(request, monkeypatch):
    """Both eager paths: inline ``next()`` (small elements) and the Prefetcher (large ones)."""
    threshold = 1 << 40 if request.param == "inline" else 0
    monkeypatch.setattr(_tf_eager, "INLINE_BELOW_BYTES", threshold)
    return request.param


def test_both_eager_paths_follow_the_sequence_of_buf_sample(eager_mode):
    reference, local = _filled(), _filled()
    expected = [reference.sample(5, 2) for _ in range(20)]
    it = iter(tf_data.as_dataset(local, sample_batch_size=5, num_steps=2))
    assert it._inline == (eager_mode == "inline")
    for want in expected:
        items, info = next(it)
        np.testing.assert_array_equal(info.ids.numpy(), want.ids)
        np.testing.assert_array_equal(info.probabilities.numpy(), want.probabilities)
        for name, leaf in items.items():
            np.testing.assert_array_equal(leaf.numpy(), want.data[name])


def test_both_eager_paths_end_when_the_buffer_is_closed(eager_mode):
    local = _filled()
    it = iter(tf_data.as_dataset(local, sample_batch_size=2, num_steps=2))
    next(it)
    local.close()
    assert sum(1 for _ in it) <= _tf_eager.EAGER_PREFETCH + 1
    with pytest.raises(StopIteration):
        next(it)


def test_both_eager_paths_raise_the_sampling_error_then_end(eager_mode):
    empty = ReplayBuffer(SPEC, 30, num_envs=NUM_ENVS, rng=0)
    it = iter(tf_data.as_dataset(empty, sample_batch_size=2, num_steps=2))
    with pytest.raises(tf.errors.UnknownError, match="NotEnoughDataError") as raised:
        next(it)
    assert isinstance(tf_data.unwrap_error(raised.value), errors.NotEnoughDataError)
    with pytest.raises(StopIteration):
        next(it)
