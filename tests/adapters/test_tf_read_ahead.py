"""The tf.data sampler's read-ahead (recollect.adapters.tf_data.chunks): a chunk drawn on a
thread while TensorFlow consumes the previous one is used only when the table was not
written since; never drawn where a draw changes the table; the process still exits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect import (  # noqa: E402
    ArraySpec,
    MinSize,
    Queue,
    ReplayBuffer,
    SampleToInsertRatio,
)
from recollect.adapters import tf_data  # noqa: E402
from recollect.adapters.tf_data import chunks as _tf_chunks  # noqa: E402
from recollect.tf_agents import TFUniformReplayBuffer  # noqa: E402

SPEC = {"t": ArraySpec((), np.int64)}
BATCH = 4
MOST = 8


def _buffer(capacity=2, **kwargs):
    """One row; with capacity 2 and windows of 2 the only valid window is the newest."""
    buf = ReplayBuffer(SPEC, capacity, num_envs=1, rng=0, **kwargs)
    _add(buf, 0)
    _add(buf, 1)
    return buf


def _add(buf, t):
    buf.add_batch({"t": np.array([t], np.int64)})


def _sampler(buf):
    """The chunked sampler, called eagerly: ``call() -> (t [k, BATCH, 2], k)``."""
    fn = _tf_chunks.chunked_sample_fn(buf, BATCH, 2, MOST, None)

    def call():
        items, _, _, ok = fn(tf.constant(0, tf.int64))
        assert bool(ok)
        t = items["t"].numpy()
        return t, t.shape[0]

    return fn, call


@pytest.mark.parametrize(
    "settle",
    [0.0, pytest.param(0.2, marks=pytest.mark.slow)],  # "drawn": ~8 s, CI and --run-slow
    ids=["in_flight", "drawn"],
)
def test_a_call_after_a_write_never_takes_the_chunk_drawn_ahead(settle):
    buf = _buffer()
    _, call = _sampler(buf)
    for _ in range(6):  # reading only: chunks grow and the next one is drawn ahead
        call()
    for t in range(2, 40):
        time.sleep(settle)  # the chunk drawn ahead is still drawing, or ready
        _add(buf, t)
        items, _ = call()
        # the only valid window is (t - 1, t): every element is drawn after the add
        assert (items[..., 1] == t).all(), (t, np.unique(items[..., 1]))
        for _ in range(3):  # back to reading only: the read-ahead restarts
            items, _ = call()
            assert (items[..., 1] == t).all()


def test_reading_only_takes_the_chunk_drawn_ahead():
    buf = _buffer(capacity=50)
    for t in range(2, 50):
        _add(buf, t)
    calls = []
    original = _tf_chunks.sample_concurrent

    def counting(*args):
        calls.append(threading.current_thread() is threading.main_thread())
        return original(*args)

    _tf_chunks.sample_concurrent = counting
    try:
        _, call = _sampler(buf)
        sizes = [call()[1] for _ in range(8)]
    finally:
        _tf_chunks.sample_concurrent = original
    assert sizes == [1, 2, 4, 8, 8, 8, 8, 8]
    # the third call on found its chunk drawn on the background thread
    assert calls[:3] == [True, True, False]
    assert calls.count(True) == 2


def _table_of(kind):
    if kind == "max_times_sampled":
        return ReplayBuffer(SPEC, 400, num_envs=1, rng=0, max_times_sampled=1)
    if kind == "queue":
        return ReplayBuffer(SPEC, 400, num_envs=1, rng=0, rate_limiter=Queue(400))
    ratio = SampleToInsertRatio(8.0, 1, error_buffer=(-(10**6), 10**6))
    return ReplayBuffer(SPEC, 400, num_envs=1, rng=0, rate_limiter=ratio)


@pytest.mark.parametrize("kind", ["max_times_sampled", "queue", "ratio"])
def test_a_table_whose_draws_change_it_is_never_drawn_ahead(kind):
    buf = _table_of(kind)
    for t in range(300):
        _add(buf, t)
    assert not buf.table.read_only_draws
    _, call = _sampler(buf)
    returned = sum(call()[1] for _ in range(5))  # 1 + 2 + 4 + 8 + 8 elements
    time.sleep(0.2)  # a draw ahead would have been made by now
    assert buf.table.samples == returned * BATCH
    if kind == "max_times_sampled":  # each drawn window was removed: none beyond those returned
        assert buf.table.num_stored == 300


def test_read_only_draws_of_the_tables():
    assert _buffer().table.read_only_draws
    assert _buffer(rate_limiter=MinSize(1)).table.read_only_draws
    for kind in ("max_times_sampled", "queue", "ratio"):
        assert not _table_of(kind).table.read_only_draws
    assert not ReplayBuffer(SPEC, 10, track_times_sampled=True).table.read_only_draws


def test_an_error_of_the_draw_ahead_is_raised_by_the_next_call():
    buf = _buffer(capacity=50)
    for t in range(2, 50):
        _add(buf, t)
    original = _tf_chunks.sample_concurrent

    def failing(*args):
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the draw ahead failed")
        return original(*args)

    _tf_chunks.sample_concurrent = failing
    try:
        _, call = _sampler(buf)
        call()
        call()  # reading only: draws the next chunk ahead, which fails
        with pytest.raises((RuntimeError, tf.errors.UnknownError), match="the draw ahead failed"):
            call()
    finally:
        _tf_chunks.sample_concurrent = original


def test_closing_the_buffer_ends_a_pipeline_with_a_chunk_drawn_ahead():
    buf = _buffer(capacity=50)
    for t in range(2, 50):
        _add(buf, t)
    iterator = iter(tf_data.as_dataset(buf, BATCH, 2).map(lambda items, info: (items, info)))

    @tf.function
    def pull():
        items, _ = next(iterator)
        return items["t"]

    for _ in range(40):
        pull()
    buf.close()
    with pytest.raises(tf.errors.OutOfRangeError):
        for _ in range(2 * tf_data.MAX_CHUNK):  # what a chunk already drawn holds, then the end
            pull()


def test_tf_agents_newest_item_only_through_map_in_tf_function():
    """max_length 2, windows of 2: the only item is the newest; a read-only phase first."""
    rb = TFUniformReplayBuffer({"t": tf.TensorSpec([], tf.int64)}, 2, 2)
    for t in range(2):
        rb.add_batch({"t": tf.fill([2], tf.constant(t, tf.int64))})
    dataset = rb.as_dataset(sample_batch_size=16, num_steps=2).map(lambda i, b: (i, b))
    iterator = iter(dataset)

    @tf.function
    def newest():
        items, info = next(iterator)
        return items["t"][:, 1], info.probabilities

    for _ in range(100):
        newest()
    for t in range(2, 60):
        if t % 3 == 0:
            time.sleep(0.05)  # the chunk drawn ahead is ready when the add comes
        rb.add_batch({"t": tf.fill([2], tf.constant(t, tf.int64))})
        last, probabilities = newest()
        assert (last.numpy() == t).all(), (t, last.numpy())
        np.testing.assert_allclose(probabilities.numpy(), 1 / 2)


EXIT_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf
    from recollect import ArraySpec, MinSize, ReplayBuffer
    from recollect.adapters import tf_data
    from recollect.adapters.tf_data import chunks as _tf_chunks
    limiter = MinSize(10) if sys.argv[1] == "blocked" else None
    buf = ReplayBuffer({"x": ArraySpec((4,), np.float32)}, 4000, num_envs=4, rng=0,
                       rate_limiter=limiter)
    for t in range(40):
        buf.add_batch({"x": np.full((4, 4), t, np.float32)})
    original = _tf_chunks.sample_concurrent
    def slow(*args):  # the draw ahead starts after the clear below: it waits on MinSize
        if sys.argv[1] == "blocked" and threading.current_thread() is not threading.main_thread():
            time.sleep(0.5)
        return original(*args)
    _tf_chunks.sample_concurrent = slow
    iterator = iter(tf_data.as_dataset(buf, 64, 2).map(lambda items, info: (items, info)))

    @tf.function
    def train():
        items, info = next(iterator)
        return tf.reduce_sum(items["x"])

    for t in range(200):  # reading only: a chunk is drawn ahead at exit
        train()
    if sys.argv[1] == "blocked":
        buf.clear()
        start = time.monotonic()
        _tf_chunks.in_flight.quiesce()
        print("quiesce_s", time.monotonic() - start)
    print("last line", flush=True)
    """
)


@pytest.mark.parametrize(
    "shape",
    [
        # about 6.5 s (a subprocess importing TensorFlow): runs with CI=true / --run-slow
        pytest.param("drawing", marks=pytest.mark.slow),
        # about 13 s (a draw blocked on MinSize until exit): runs with CI=true / --run-slow
        pytest.param("blocked", marks=pytest.mark.slow),
    ],
)
def test_a_script_exits_with_a_chunk_drawn_ahead(shape):
    out = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, shape],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "last line" in out.stdout
    if shape == "blocked":  # the draw waiting on MinSize ends at exit, not at the 5 s timeout
        quiesce_s = float(out.stdout.split("quiesce_s")[1].split()[0])
        assert quiesce_s < 2.5
