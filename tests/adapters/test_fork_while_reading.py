"""Forking while an adapter's read-ahead or prefetch thread draws: no child may hang.

Each test forks 100 times while a background thread keeps drawing from the
buffer; every child samples once and exits. Before the table's locks were
freed in a forked child, 3-6 of 100 children hung in ``sample()`` on the
eager tf.data path and 1-3 of 100 on the graph path with a prioritized table.
"""

from __future__ import annotations

import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

from fork_helpers import fork_and_run
from recollect import ArraySpec, Prioritized, ReplayBuffer

FORKS = 100
SPEC = {"obs": ArraySpec((64, 64), np.uint8), "r": ArraySpec((), np.float32)}


def _buffer(**kwargs) -> ReplayBuffer:
    buf = ReplayBuffer(SPEC, 512, num_envs=4, rng=0, **kwargs)
    for i in range(128):
        buf.add_batch({"obs": np.full((4, 64, 64), i, np.uint8), "r": np.ones(4, np.float32)})
    return buf


def _child(buf: ReplayBuffer) -> None:
    assert buf.sample(8, 2).data["obs"].shape == (8, 2, 64, 64)


def _fork_while_drawing(buf: ReplayBuffer, draw_forever) -> list[str]:
    """Runs ``draw_forever(stop)`` on a thread and forks ``FORKS`` times meanwhile."""
    stop, started = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def run():
        try:
            draw_forever(stop, started)
        except BaseException as err:  # reported below
            errors.append(err)
            started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(60)
    try:
        outcomes = [fork_and_run(lambda: _child(buf), timeout_s=10) for _ in range(FORKS)]
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    return outcomes


def _iterate(dataset):
    def draw_forever(stop, started):
        iterator = iter(dataset)
        next(iterator)
        started.set()
        while not stop.is_set():
            next(iterator)

    return draw_forever


@pytest.mark.slow
def test_fork_while_tf_eager_iteration_reads_ahead():
    pytest.importorskip("tensorflow")
    from recollect.adapters import tf_data

    buf = _buffer()
    dataset = tf_data.as_dataset(buf, sample_batch_size=32, num_steps=2)
    outcomes = _fork_while_drawing(buf, _iterate(dataset))
    assert outcomes.count("ok") == FORKS, {o: outcomes.count(o) for o in set(outcomes)}


@pytest.mark.slow
def test_fork_while_tf_graph_pipeline_reads_ahead_from_a_prioritized_table():
    pytest.importorskip("tensorflow")
    from recollect.adapters import tf_data

    buf = _buffer(sampler=Prioritized(), sequence_length=2)
    dataset = tf_data.as_dataset(buf, sample_batch_size=32, num_steps=2)
    dataset = dataset.map(lambda items, info: items)  # leaves the eager path: the tf.data graph
    outcomes = _fork_while_drawing(buf, _iterate(dataset))
    assert outcomes.count("ok") == FORKS, {o: outcomes.count(o) for o in set(outcomes)}


@pytest.mark.slow
def test_fork_while_torch_dataset_prefetches():
    pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    buf = _buffer()
    dataset = ReplayDataset(buf, batch_size=32, num_steps=2, prefetch=2)
    outcomes = _fork_while_drawing(buf, _iterate(dataset))
    assert outcomes.count("ok") == FORKS, {o: outcomes.count(o) for o in set(outcomes)}
