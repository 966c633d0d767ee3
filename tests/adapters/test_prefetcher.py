"""recollect.adapters.prefetch.Prefetcher: draw order, the consumer's help, errors, stopping."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recollect import ArraySpec, ReplayBuffer
from recollect.adapters.prefetch import Prefetcher, draw_concurrent


def _counting_draw(finish_delay=None, fail_at=None):
    """A draw handing out 0, 1, 2, ... in call order; finish() records the finishing thread."""
    tickets = itertools.count()
    finished_on: dict[int, str] = {}

    def draw():
        k = next(tickets)
        if k == fail_at:
            raise ValueError(f"draw {k} failed")

        def finish():
            if finish_delay is not None:
                finish_delay()
            finished_on[k] = threading.current_thread().name
            return k

        return finish

    return draw, finished_on


@settings(max_examples=25, deadline=None)
@given(
    depth=st.integers(1, 4),
    threads=st.integers(1, 3),
    jitter=st.lists(st.floats(0, 2e-4), min_size=1, max_size=7),
)
def test_items_arrive_in_draw_order_for_any_threads_and_timing(depth, threads, jitter):
    delays = itertools.cycle(jitter)
    draw, _ = _counting_draw(finish_delay=lambda: time.sleep(next(delays)))
    prefetcher = Prefetcher(draw, depth, lambda: False, threads)
    try:
        assert [next(prefetcher) for _ in range(30)] == list(range(30))
    finally:
        prefetcher.close()


def test_the_consumer_finishes_items_itself_when_the_producer_is_slow():
    def slow_on_producer_threads():
        if threading.current_thread().name.startswith("recollect-prefetch"):
            time.sleep(0.05)

    draw, finished_on = _counting_draw(finish_delay=slow_on_producer_threads)
    prefetcher = Prefetcher(draw, 2, lambda: False, threads=1)
    try:
        got = [next(prefetcher) for _ in range(12)]
    finally:
        prefetcher.close()
    assert got == list(range(12))
    by_consumer = [k for k, name in finished_on.items() if name == threading.current_thread().name]
    assert len(by_consumer) >= 6  # the producer finishes one item per 50 ms at most


def test_an_error_is_raised_in_order_and_ends_iteration():
    draw, _ = _counting_draw(fail_at=3)
    prefetcher = Prefetcher(draw, 4, lambda: False, threads=2)
    assert [next(prefetcher) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="draw 3 failed"):
        next(prefetcher)
    with pytest.raises(StopIteration):
        next(prefetcher)
    for worker in prefetcher._workers:
        worker.join(2.0)
        assert not worker.is_alive()


def test_should_stop_ends_iteration_after_the_items_drawn_before():
    stop = threading.Event()
    draw, _ = _counting_draw()
    prefetcher = Prefetcher(draw, 3, stop.is_set, threads=1)
    assert next(prefetcher) == 0
    stop.set()
    rest = list(prefetcher)
    assert rest == list(range(1, 1 + len(rest))) and len(rest) <= 3 + 1
    assert prefetcher.closed


def test_close_from_another_thread_ends_a_waiting_consumer():
    gate = threading.Event()
    draw, _ = _counting_draw(finish_delay=lambda: gate.wait(5.0))
    prefetcher = Prefetcher(draw, 1, lambda: False, threads=1)
    threading.Timer(0.1, prefetcher.close).start()
    threading.Timer(0.2, gate.set).start()
    with pytest.raises(StopIteration):
        next(prefetcher)


def _numbered(sequence_length=None):
    buf = ReplayBuffer(
        {"x": ArraySpec((3,), np.float32)}, 40, num_envs=2, rng=7, sequence_length=sequence_length
    )
    for t in range(20):
        buf.add_batch({"x": np.full((2, 3), t, np.float32)})
    return buf


def test_drawn_batches_equal_a_sequential_sample_loop():
    """Same seed, same static buffer: prefetching with 2 threads yields buf.sample's sequence."""
    reference, buf = _numbered(), _numbered()
    expected = [reference.sample(5, 2) for _ in range(25)]
    prefetcher = Prefetcher(lambda: draw_concurrent(buf, 5, 2), 3, lambda: False, threads=2)
    try:
        got = [next(prefetcher) for _ in range(25)]
    finally:
        prefetcher.close()
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(have.ids, want.ids)
        np.testing.assert_array_equal(have.data["x"], want.data["x"])


@pytest.mark.parametrize(
    ("batch_size", "num_steps", "sequence_length"),
    [(np.int64(4), 2, None), (4, None, None), (3, None, 4), (3, 4, 4)],
)
def test_a_concurrent_draw_equals_buf_sample(batch_size, num_steps, sequence_length):
    """Same draws, shapes and ids as ``sample``: numpy ints, fixed sequence_length included."""
    reference, buf = _numbered(sequence_length), _numbered(sequence_length)
    for _ in range(3):
        want = reference.sample(batch_size, num_steps)
        have = draw_concurrent(buf, batch_size, num_steps)()
        np.testing.assert_array_equal(have.ids, want.ids)
        assert have.data["x"].shape == want.data["x"].shape
        np.testing.assert_array_equal(have.data["x"], want.data["x"])
