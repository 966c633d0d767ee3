"""recollect.jax.as_iterator: jax.Array nests with the spec's dtypes/shapes, prefetch, closing."""

from __future__ import annotations

import gc

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from image_ids import assert_window_pixels_match_ids, image_buffer_with_id_pixels  # noqa: E402
from recollect import ArraySpec, ReplayBuffer, TransitionBuffer, errors  # noqa: E402
from recollect import ids as rc_ids  # noqa: E402
from recollect.adapters.jax import as_iterator  # noqa: E402

NUM_ENVS = 2
SPEC = {
    "obs": ArraySpec((3,), np.float32),
    "action": ArraySpec((), np.int32),
    "pixels": ArraySpec((2, 2), np.uint8),
    "h": ArraySpec((), np.float16),
    "done": ArraySpec((), bool),
}


def _filled(steps=8):
    buf = ReplayBuffer(SPEC, 20, num_envs=NUM_ENVS, rng=2)
    for t in range(steps):
        buf.add_batch(
            {
                "obs": np.full((NUM_ENVS, 3), t, np.float32),
                "action": (100 * np.arange(NUM_ENVS) + t).astype(np.int32),
                "pixels": np.full((NUM_ENVS, 2, 2), t, np.uint8),
                "h": np.zeros(NUM_ENVS, np.float16),
                "done": np.zeros(NUM_ENVS, bool),
            }
        )
    return buf


@pytest.fixture(scope="module")
def buf():
    return _filled()


@pytest.mark.parametrize("num_steps", [None, 2])
def test_yields_jax_arrays_with_the_spec_dtypes_and_shapes(buf, num_steps):
    with as_iterator(buf, batch_size=6, num_steps=num_steps) as it:
        data, info = next(it)
    outer = [6] if num_steps is None else [6, num_steps]
    for key, leaf in SPEC.items():
        assert isinstance(data[key], jax.Array)
        assert data[key].dtype == leaf.dtype
        assert list(data[key].shape) == [*outer, *leaf.shape]
        assert data[key].devices() == {jax.devices()[0]}
    assert info.ids.dtype == np.int64 and info.probabilities.dtype == np.float64
    action = np.asarray(data["action"]).reshape(6, -1)[:, 0]
    _, rows, times = rc_ids.decode(np.asarray(info.ids))
    np.testing.assert_array_equal(action, 100 * rows + times)


def test_prefetches_many_batches_and_close_ends_iteration(buf):
    it = as_iterator(buf, batch_size=3, num_steps=2, prefetch=4)
    shapes = [next(it)[0]["obs"].shape for _ in range(10)]
    assert shapes == [(3, 2, 3)] * 10
    it.close()
    with pytest.raises(StopIteration):
        next(it)
    assert it.closed


def test_buffer_close_ends_iteration():
    local = _filled()
    it = as_iterator(local, batch_size=2)
    next(it)
    local.close()
    assert sum(1 for _ in it) <= 3
    it.close()


def test_errors_reach_the_consumer():
    empty = ReplayBuffer(SPEC, 20, num_envs=NUM_ENVS)
    with (
        as_iterator(empty, batch_size=2) as it,
        pytest.raises(errors.NotEnoughDataError, match="empty buffer"),
    ):
        next(it)
    with pytest.raises(errors.InvalidArgumentError, match="prefetch"):
        as_iterator(empty, batch_size=2, prefetch=0)


def test_an_abandoned_iterator_stops_its_thread(buf):
    it = as_iterator(buf, batch_size=2)
    next(it)
    thread = it._prefetcher._workers[0]
    del it
    gc.collect()
    thread.join(2.0)
    assert not thread.is_alive()


def test_transition_buffer_samples_become_jax_fields():
    tb = TransitionBuffer(capacity=16, num_envs=2, rng=0)
    for t in range(4):
        obs = np.full((2, 3), t, np.float32)
        tb.add(obs, np.array([0, 1]), np.ones(2, np.float32), obs + 1, np.zeros(2, bool))
    with as_iterator(tb, batch_size=5) as it:
        sample = next(it)
    assert isinstance(sample.observation, jax.Array) and sample.observation.shape == (5, 3)
    np.testing.assert_array_equal(sample.next_observation, np.asarray(sample.observation) + 1)
    assert isinstance(sample.ids, np.ndarray)


def test_kept_batches_are_never_overwritten_by_later_samples():
    """Large gathers may recycle output memory; an aliased jax.Array must keep its values."""
    big = image_buffer_with_id_pixels()
    with as_iterator(big, batch_size=32, num_steps=2) as it:
        kept = [next(it) for _ in range(12)]
    for data, info in kept:
        assert_window_pixels_match_ids(np.asarray(data["obs"]), info.ids)


LEAVES = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.arange(6, dtype=np.int64),  # canonicalised to int32 unless jax_enable_x64
    np.array([True, False, True]),
    np.ones((2, 2), np.float16),
    np.arange(10, dtype=np.uint8)[::2],  # not contiguous
    np.zeros((0, 3), np.float32),
]


@pytest.mark.parametrize("device", [None, "cpu0", "sharding"])
def test_direct_placement_equals_jax_device_put(device):
    from jax.sharding import SingleDeviceSharding

    from recollect.adapters.jax import _Placer

    target = {None: None, "cpu0": jax.devices()[0], "sharding": None}[device]
    if device == "sharding":
        target = SingleDeviceSharding(jax.devices()[0])
    place = _Placer(target)
    assert place._fast is not None  # this JAX has the internal transfer; the probe passed
    for x in LEAVES:
        got, want = place({"x": x})["x"], jax.device_put(x, target)
        assert (got.dtype, got.shape, got.sharding) == (want.dtype, want.shape, want.sharding)
        assert got.committed == want.committed == (target is not None)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_without_the_internal_transfer_the_public_device_put_is_used(monkeypatch, buf):
    from recollect.adapters import jax as rj

    monkeypatch.setattr(rj, "_direct_transfer", lambda: None)
    place = rj._Placer(None)
    assert place._fast is None
    got = place({"x": LEAVES[0]})["x"]
    np.testing.assert_array_equal(np.asarray(got), LEAVES[0])
    with as_iterator(buf, batch_size=4, num_steps=2) as it:
        data, _ = next(it)
    assert isinstance(data["obs"], jax.Array) and data["obs"].shape == (4, 2, 3)


def test_batches_follow_the_sequence_of_buf_sample():
    reference, local = _filled(), _filled()
    expected = [reference.sample(4, 2) for _ in range(20)]
    with as_iterator(local, batch_size=4, num_steps=2, num_threads=2) as it:
        got = [next(it) for _ in range(20)]
    for want, (data, info) in zip(expected, got, strict=True):
        np.testing.assert_array_equal(info.ids, want.ids)
        np.testing.assert_array_equal(np.asarray(data["obs"]), want.data["obs"])
