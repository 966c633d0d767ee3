"""One thread layer between a served table and an adapter: reading ``client.table(name)``
through torch, JAX or tf.data starts the SampleStream's request threads and no prefetch
threads over them (the adapter's conversion runs on the request threads)."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import recollect as rc
from recollect.service import Server

SPEC = {"obs": rc.ArraySpec((3,), np.float32)}
NUM_ENVS = 4


def served() -> rc.service.Client:
    client = Server({"t": rc.ReplayBuffer(SPEC, 400, NUM_ENVS)}).client()
    with client.writer("t", NUM_ENVS) as writer:
        for _ in range(10):
            writer.add_batch({"obs": np.zeros((NUM_ENVS, 3), np.float32)})
    return client


def started_by(read) -> Counter:
    """The recollect threads alive after ``read()`` that were not before, by kind:
    ``{"recollect-sample": n, "recollect-prefetch": m}``. ``read`` returns a function that
    holds its iterator (a collected iterator closes, and its threads end) and then closes it."""
    before = set(threading.enumerate())
    done = read()
    kinds: Counter = Counter()
    for thread in set(threading.enumerate()) - before:
        for kind in ("recollect-sample", "recollect-prefetch"):
            if thread.name.startswith(kind):
                kinds[kind] += 1
    done()
    return kinds


@pytest.mark.parametrize("num_threads", [1, 3])
def test_a_torch_dataset_of_a_served_table_starts_only_the_streams_threads(num_threads) -> None:
    torch = pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    client = served()
    dataset = ReplayDataset(client.table("t"), 8, 2, num_threads=num_threads, max_in_flight=2)

    def read():
        it = iter(dataset)
        for _ in range(10):
            data, _ = next(it)
            assert isinstance(data["obs"], torch.Tensor) and data["obs"].shape == (8, 2, 3)

        def done() -> None:  # holds the iterator: dropping it would stop the stream's threads
            assert not it.closed
            dataset.close()

        return done

    started = started_by(read)
    client.close()
    assert started["recollect-prefetch"] == 0
    assert 1 <= started["recollect-sample"] <= 2  # the stream's max_in_flight request threads


def test_a_jax_iterator_of_a_served_table_starts_only_the_streams_threads() -> None:
    pytest.importorskip("jax")
    from recollect.adapters.jax import as_iterator

    client = served()

    def read():
        it = as_iterator(client.table("t"), 8, 2, num_threads=2, max_in_flight=3)
        for _ in range(10):
            next(it)
        return it.close

    started = started_by(read)
    client.close()
    assert started["recollect-prefetch"] == 0
    assert 1 <= started["recollect-sample"] <= 3


def test_a_tf_dataset_of_a_served_table_starts_only_the_streams_threads() -> None:
    pytest.importorskip("tensorflow")
    from recollect.adapters.tf_data import as_dataset

    client = served()

    def read():
        it = iter(as_dataset(client.table("t"), 8, 2, max_in_flight=2))
        for _ in range(10):
            items, _ = next(it)
            assert items["obs"].shape == (8, 2, 3)
        return lambda: client.close() or it  # keeps the iterator (and its stream) alive

    started = started_by(read)
    client.close()
    assert started["recollect-prefetch"] == 0
    assert 1 <= started["recollect-sample"] <= 2


def test_a_sample_stream_converts_each_batch_on_its_request_threads() -> None:
    client = served()
    stream = rc.service.SampleStream(
        client.table("t"), 4, 2, convert=lambda s: (threading.current_thread().name, s)
    )
    names = set()
    for _ in range(6):
        name, sample = next(stream)
        assert sample.data["obs"].shape == (4, 2, 3)
        names.add(name)
    stream.close()
    assert stream.closed and names and all(n.startswith("recollect-sample") for n in names)
    client.close()
