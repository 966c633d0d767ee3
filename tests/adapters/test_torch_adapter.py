"""recollect.torch.ReplayDataset: spec dtypes/shapes, DataLoader, devices, closing."""

from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from image_ids import assert_window_pixels_match_ids, image_buffer_with_id_pixels  # noqa: E402
from recollect import ArraySpec, BufferInfo, ReplayBuffer, TransitionBuffer, errors  # noqa: E402
from recollect import ids as rc_ids  # noqa: E402
from recollect.adapters.torch import ReplayDataset  # noqa: E402

NUM_ENVS = 2
SPEC = {
    "obs": ArraySpec((3, 2), np.float32),
    "action": ArraySpec((), np.int32),
    "pixels": ArraySpec((4, 4, 1), np.uint8),
    "h": ArraySpec((2,), np.float16),
    "done": ArraySpec((), bool),
}
TORCH_DTYPES = {
    "obs": torch.float32,
    "action": torch.int32,
    "pixels": torch.uint8,
    "h": torch.float16,
    "done": torch.bool,
}


def _filled(steps=10):
    buf = ReplayBuffer(SPEC, 40, num_envs=NUM_ENVS, rng=1)
    for t in range(steps):
        rows = np.arange(NUM_ENVS)
        buf.add_batch(
            {
                "obs": np.full((NUM_ENVS, 3, 2), t, np.float32),
                "action": (100 * rows + t).astype(np.int32),
                "pixels": np.full((NUM_ENVS, 4, 4, 1), t, np.uint8),
                "h": np.zeros((NUM_ENVS, 2), np.float16),
                "done": np.zeros(NUM_ENVS, bool),
            }
        )
    return buf


@pytest.fixture(scope="module")
def buf():
    return _filled()


@pytest.mark.parametrize("num_steps", [None, 3])
def test_yields_tensor_nests_with_the_spec_dtypes_and_shapes(buf, num_steps):
    ds = ReplayDataset(buf, batch_size=5, num_steps=num_steps)
    data, info = next(iter(ds))
    ds.close()
    outer = [5] if num_steps is None else [5, num_steps]
    for key, leaf in SPEC.items():
        assert isinstance(data[key], torch.Tensor)
        assert data[key].dtype == TORCH_DTYPES[key]
        assert list(data[key].shape) == [*outer, *leaf.shape]
        assert data[key].device.type == "cpu"
    assert isinstance(info, BufferInfo)
    assert info.ids.dtype == torch.int64 and info.probabilities.dtype == torch.float64
    ids = info.ids.numpy()
    action = data["action"].numpy() if num_steps is None else data["action"].numpy()[:, 0]
    _, rows, times = rc_ids.decode(ids)
    np.testing.assert_array_equal(action, 100 * rows + times)


def test_works_with_a_dataloader_of_batch_size_none(buf):
    ds = ReplayDataset(buf, batch_size=4, num_steps=2, prefetch=3)
    loader = DataLoader(ds, batch_size=None)
    batches = []
    for i, (data, _) in enumerate(loader):
        batches.append(data["obs"].shape)
        if i == 4:
            break
    ds.close()
    assert batches == [torch.Size([4, 2, 3, 2])] * 5


def test_cpu_device_and_pin_memory_without_accelerator(buf):
    ds = ReplayDataset(buf, batch_size=2, device="cpu", pin_memory=True)
    data, _ = next(iter(ds))
    ds.close()
    assert data["obs"].device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_device_placement(buf):
    ds = ReplayDataset(buf, batch_size=2, num_steps=2, device="cuda", pin_memory=True)
    data, _ = next(iter(ds))
    ds.close()
    assert all(x.device.type == "cuda" for x in data.values())
    assert data["pixels"].dtype == torch.uint8


def test_close_stops_iteration_cleanly(buf):
    ds = ReplayDataset(buf, batch_size=2)
    it = iter(ds)
    next(it)
    ds.close()
    with pytest.raises(StopIteration):
        next(it)
    assert list(ds) == []
    assert ds.closed


def test_buffer_close_stops_iteration_cleanly():
    local = _filled()
    ds = ReplayDataset(local, batch_size=2, prefetch=2)
    it = iter(ds)
    next(it)
    local.close()
    assert sum(1 for _ in it) <= 3  # only batches already prefetched
    ds.close()


def test_sampling_errors_reach_the_consumer():
    empty = ReplayBuffer(SPEC, 40, num_envs=NUM_ENVS)
    ds = ReplayDataset(empty, batch_size=2)
    with pytest.raises(errors.NotEnoughDataError, match="empty buffer"):
        next(iter(ds))
    ds.close()
    with pytest.raises(errors.InvalidArgumentError, match="prefetch"):
        ReplayDataset(empty, batch_size=2, prefetch=0)


def test_an_abandoned_iterator_stops_its_thread(buf):
    ds = ReplayDataset(buf, batch_size=2)
    it = iter(ds)
    next(it)
    thread = it._workers[0]
    del it
    gc.collect()
    thread.join(2.0)
    assert not thread.is_alive()


def test_transition_buffer_samples_become_tensor_fields():
    tb = TransitionBuffer(capacity=16, num_envs=2, rng=0)
    for t in range(4):
        obs = np.full((2, 3), t, np.float32)
        tb.add(obs, np.array([0, 1]), np.ones(2, np.float32), obs + 1, np.zeros(2, bool))
    ds = ReplayDataset(tb, batch_size=5)
    sample = next(iter(ds))
    ds.close()
    assert isinstance(sample.observation, torch.Tensor) and sample.observation.shape == (5, 3)
    torch.testing.assert_close(sample.next_observation, sample.observation + 1)


def test_kept_batches_are_never_overwritten_by_later_samples():
    """Large gathers may recycle output memory; a batch held as tensors must keep its values."""
    big = image_buffer_with_id_pixels()
    ds = ReplayDataset(big, batch_size=32, num_steps=2)
    it = iter(ds)
    kept = [next(it) for _ in range(12)]
    ds.close()
    for data, info in kept:
        assert_window_pixels_match_ids(data["obs"].numpy(), info.ids.numpy())


def test_two_producer_threads_yield_valid_batches_and_stop_cleanly():
    local = _filled()
    ds = ReplayDataset(local, batch_size=4, num_steps=2, prefetch=3, num_threads=2)
    it = iter(ds)
    stored = set(local.reader.item_ids().reshape(-1).tolist())
    for _ in range(20):
        data, info = next(it)
        assert data["obs"].shape == (4, 2, 3, 2) and data["obs"].dtype == torch.float32
        assert set(info.ids.tolist()) <= stored
    local.close()
    assert sum(1 for _ in it) <= 3 + 2  # prefetched plus one in flight per thread
    for worker in it._workers:  # both producers end once the buffer is closed
        worker.join(2.0)
        assert not worker.is_alive()
    ds.close()
    with pytest.raises(errors.InvalidArgumentError, match="num_threads"):
        ReplayDataset(local, batch_size=2, num_threads=0)


def test_an_error_in_one_producer_thread_stops_the_others():
    empty = ReplayBuffer(SPEC, 40, num_envs=NUM_ENVS)
    ds = ReplayDataset(empty, batch_size=2, num_threads=2)
    it = iter(ds)
    with pytest.raises(errors.NotEnoughDataError, match="empty buffer"):
        next(it)
    for worker in it._workers:
        worker.join(2.0)
        assert not worker.is_alive()
