"""The dataset adapters read a served table: ``client.table(name)`` in torch, JAX and tf.data.

The embedded server serves here (Ray shards use the same client, see
tests/ray_actors/test_ray_serve.py).
A counting handle records how many sample requests overlap, so ``max_in_flight`` is
checked both ways: reached, and never exceeded.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.service import Server, TableHandle

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "t": rc.ArraySpec((), np.int64)}
NUM_ENVS = 4


class CountingHandle(TableHandle):
    """A table handle that records the largest number of concurrent sample requests
    (``sample_batches``: what a SampleStream sends) and the batches each asked for."""

    def __init__(self, client: rc.service.Client, name: str, delay: float = 0.05) -> None:
        super().__init__(client, name)
        self.delay = delay
        self.active = self.most = self.calls = 0
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def sample_batches(self, batch_size, num_batches, *args, **kwargs):
        with self._lock:
            self.active += 1
            self.calls += 1
            self.most = max(self.most, self.active)
            self.batches.append(num_batches)
        try:
            time.sleep(self.delay)
            return super().sample_batches(batch_size, num_batches, *args, **kwargs)
        finally:
            with self._lock:
                self.active -= 1


def served(num_steps: int = 20, **buffer_kwargs) -> rc.service.Client:
    """A client of one table "t" holding ``num_steps`` steps per row (obs = t, row, row)."""
    client = Server({"t": rc.ReplayBuffer(SPEC, 400, NUM_ENVS, **buffer_kwargs)}).client()
    if num_steps:
        with client.writer("t", NUM_ENVS) as writer:
            for t in range(num_steps):
                obs = np.stack([np.full(NUM_ENVS, t), np.arange(NUM_ENVS), np.arange(NUM_ENVS)], 1)
                writer.add_batch({"obs": obs.astype(np.float32), "t": np.full(NUM_ENVS, t)})
    return client


def check_windows(obs: np.ndarray, t: np.ndarray, batch: int, num_steps: int) -> None:
    """Each window holds consecutive steps of one row."""
    assert obs.shape == (batch, num_steps, 3) and t.shape == (batch, num_steps)
    np.testing.assert_array_equal(np.diff(t, axis=1), 1)
    np.testing.assert_array_equal(obs[..., 0], t)
    np.testing.assert_array_equal(obs[..., 1], obs[:, :1, 1].repeat(num_steps, 1))


# -- torch ---------------------------------------------------------------------


def test_torch_dataset_of_a_served_table_keeps_max_in_flight_requests_outstanding() -> None:
    torch = pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    client = served()
    handle = CountingHandle(client, "t")
    dataset = ReplayDataset(handle, batch_size=8, num_steps=2, max_in_flight=3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None)
    batches = list(itertools.islice(iter(loader), 12))
    for data, info in batches:
        assert isinstance(data["obs"], torch.Tensor) and data["obs"].dtype == torch.float32
        assert info.ids.dtype == torch.int64 and info.probabilities.dtype == torch.float64
        check_windows(data["obs"].numpy(), data["t"].numpy(), 8, 2)
        np.testing.assert_allclose(info.probabilities.numpy(), 1 / (NUM_ENVS * 19))
    assert handle.most == 3  # reached, and never more
    dataset.close()
    client.close()


def test_torch_dataset_of_a_served_table_ends_when_the_client_closes() -> None:
    pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    client = served()
    iterator = iter(ReplayDataset(client.table("t"), batch_size=4, prefetch=2, max_in_flight=2))
    next(iterator)
    client.close()
    rest = list(itertools.islice(iterator, 100))  # what was already drawn or on its way
    assert len(rest) <= 2 + 2 + 1


def test_torch_dataset_of_a_served_table_raises_the_shards_error() -> None:
    pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    client = served(num_steps=0)
    with pytest.raises(NotEnoughDataError):
        next(iter(ReplayDataset(client.table("t"), batch_size=4)))
    with pytest.raises(InvalidArgumentError, match="max_in_flight"):
        ReplayDataset(client.table("t"), batch_size=4, max_in_flight=0)
    client.close()


def test_prioritized_samples_of_a_served_table_feed_priority_updates() -> None:
    pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    client = served(sampler=rc.Prioritized(), sequence_length=1)
    handle = client.table("t")
    dataset = ReplayDataset(handle, batch_size=16, max_in_flight=2)
    for (_data, info), _ in zip(dataset, range(20), strict=False):
        handle.update_priorities(info.ids.numpy(), np.full(16, 0.5))
    target = info.ids.numpy()[0]
    handle.update_priorities([target], [1000.0], wait=True)
    _data, info = next(iter(dataset))
    ids, probabilities = info.ids.numpy(), info.probabilities.numpy()
    # that step now holds over half of the priority mass (the others have <= 1 each)
    assert target in ids
    assert np.all(probabilities[ids == target] > 0.5)
    assert np.all(probabilities[ids != target] < 0.01)
    dataset.close()
    client.close()


# -- JAX -----------------------------------------------------------------------


def test_jax_iterator_of_a_served_table() -> None:
    jax = pytest.importorskip("jax")
    from recollect.adapters.jax import as_iterator

    client = served()
    handle = CountingHandle(client, "t")
    with as_iterator(handle, batch_size=8, num_steps=3, max_in_flight=2) as iterator:
        for data, info in itertools.islice(iterator, 6):
            assert isinstance(data["obs"], jax.Array)
            check_windows(np.asarray(data["obs"]), np.asarray(data["t"]), 8, 3)
            assert info.ids.dtype == np.int64
    assert handle.most == 2
    with pytest.raises(InvalidArgumentError, match="max_in_flight"):
        as_iterator(handle, batch_size=8, max_in_flight=0)
    iterator = as_iterator(client.table("t"), batch_size=8)
    next(iterator)
    client.close()
    assert len(list(itertools.islice(iterator, 100))) <= 2 + 2 + 1


# -- tf.data -------------------------------------------------------------------


def test_tf_dataset_of_a_served_table_eagerly_and_in_a_tf_function() -> None:
    tf = pytest.importorskip("tensorflow")
    from recollect.adapters.tf_data import as_dataset

    client = served()
    handle = CountingHandle(client, "t")
    dataset = as_dataset(handle, sample_batch_size=8, num_steps=2, max_in_flight=3)
    items_spec, info_spec = dataset.element_spec
    assert items_spec["obs"] == tf.TensorSpec([8, 2, 3], tf.float32)
    assert info_spec.ids == tf.TensorSpec([8], tf.int64)
    for items, info in dataset.take(5):
        check_windows(items["obs"].numpy(), items["t"].numpy(), 8, 2)
        np.testing.assert_allclose(info.probabilities.numpy(), 1 / (NUM_ENVS * 19))
    assert handle.most == 3

    iterator = iter(dataset)

    @tf.function
    def train_step(it):
        items, _info = next(it)
        return tf.reduce_sum(items["t"][:, 1] - items["t"][:, 0])

    assert int(train_step(iterator)) == 8  # every window: two consecutive steps
    client.close()


def test_tf_dataset_of_a_served_table_without_a_batch_axis_and_its_errors() -> None:
    tf = pytest.importorskip("tensorflow")
    from recollect.adapters.tf_data import as_dataset, unwrap_error

    client = served()
    dataset = as_dataset(client.table("t"), num_steps=2)
    assert dataset.element_spec[0]["obs"] == tf.TensorSpec([2, 3], tf.float32)
    assert dataset.element_spec[1].ids == tf.TensorSpec([], tf.int64)
    items, _ = next(iter(dataset))
    assert int(items["t"][1] - items["t"][0]) == 1
    with pytest.raises(InvalidArgumentError, match="max_in_flight"):
        as_dataset(client.table("t"), 4, max_in_flight=0)
    with pytest.raises(InvalidArgumentError, match="single_deterministic_pass=True needs"):
        as_dataset(client.table("t"), 4, single_deterministic_pass=True)
    iterator = iter(as_dataset(client.table("t"), 4))
    next(iterator)
    client.close()
    assert len(list(itertools.islice(iterator, 100))) <= 2 + 1  # ends, no hang

    empty = served(num_steps=0)
    with pytest.raises(tf.errors.OpError) as raised:
        next(iter(as_dataset(empty.table("t"), 4)))
    assert isinstance(unwrap_error(raised.value), NotEnoughDataError)
    empty.close()
