"""Rate limiters: Reverb's rules, construction errors, blocking with timeouts, close, threads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import (
    InvalidArgumentError,
    NotEnoughDataError,
    RateLimiterTimeout,
    RecollectError,
    StateError,
)

SPEC = {"x": rc.ArraySpec((), np.int64), "y": rc.ArraySpec((2,), np.float32)}


def step(value: int, n: int = 1) -> dict:
    return {"x": np.full(n, value, np.int64), "y": np.full((n, 2), value, np.float32)}


def buffer(capacity: int = 1000, num_envs: int = 1, **kwargs) -> rc.ReplayBuffer:
    return rc.ReplayBuffer(SPEC, capacity, num_envs, rng=0, **kwargs)


# -- the rules -------------------------------------------------------------------------
def test_min_size_blocks_samples_only_until_min_size():
    limiter = rc.MinSize(3)
    assert limiter.insert_allowed(10**6, 0, 1, 10**6)
    assert not limiter.sample_allowed(2, 0, 1, 2)
    assert limiter.sample_allowed(3, 10**6, 1, 3)


def test_sample_to_insert_ratio_bounds_follow_reverb():
    limiter = rc.SampleToInsertRatio(8, 1000, 200)
    assert (limiter.min_diff, limiter.max_diff) == (7800.0, 8200.0)
    pair = rc.SampleToInsertRatio(2.0, 10, (-5.0, 15.0))
    assert (pair.min_diff, pair.max_diff) == (-5.0, 15.0)
    # filling up is free, then inserts wait while diff + spi > max_diff
    assert limiter.insert_allowed(1000, 0, 1, 999)
    assert not limiter.insert_allowed(1025, 0, 1, 1025)
    assert limiter.insert_allowed(1025, 200, 1, 1025)
    assert limiter.sample_allowed(1000, 0, 200, 1000)
    assert not limiter.sample_allowed(1000, 0, 201, 1000)


def test_queue_allows_size_items_in_flight():
    queue = rc.Queue(2)
    assert queue.insert_allowed(1, 0, 1, 1)
    assert not queue.insert_allowed(2, 0, 1, 2)
    assert queue.sample_allowed(2, 1, 1, 1)
    assert not queue.sample_allowed(2, 2, 1, 0)
    assert isinstance(rc.Stack(3), rc.Queue)


# -- construction errors ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: rc.MinSize(0), r"min_size_to_sample.*>= 1; got min_size_to_sample=0"),
        (lambda: rc.MinSize(True), r"min_size_to_sample.*got min_size_to_sample=True"),
        (lambda: rc.Queue(0), r"`size` must be an int >= 1; got size=0"),
        (
            lambda: rc.RateLimiter(0.0, 1, 0, 1),
            r"samples_per_insert.*> 0; got samples_per_insert=0.0",
        ),
        (
            lambda: rc.RateLimiter(1.0, 1, 5, 1),
            r"min_diff.*<= `max_diff`; got min_diff=5, max_diff=1",
        ),
        (lambda: rc.RateLimiter(1.0, 1, "a", 1), r"`min_diff` must be a number; got min_diff='a'"),
        (
            lambda: rc.SampleToInsertRatio(8, 1000, 7.9),
            r"error buffer \[7992.1, 8007.9\].*spans 15.8, less than 2 \* max\(1, "
            r"samples_per_insert\) = 16.*at least 8",
        ),
        (
            lambda: rc.SampleToInsertRatio(0.5, 10, (0.0, 1.5)),
            r"spans 1.5, less than .* = 2",
        ),
        (lambda: rc.SampleToInsertRatio(1, 10, -1), r"`error_buffer` must be >= 0; got -1"),
        (lambda: rc.SampleToInsertRatio(1, 10, (1, 2, 3)), r"a \(min_diff, max_diff\) pair"),
    ],
)
def test_construction_errors_name_the_numbers(make, match):
    with pytest.raises(InvalidArgumentError, match=match):
        make()


def test_buffer_refuses_a_limiter_that_deadlocks_on_its_rows():
    with pytest.raises(
        InvalidArgumentError,
        match=r"Queue\(size=2\) cannot serve inserts of 4 step\(s\) and samples of 1 window.*"
        r"max_diff - min_diff = 2 is less than 4",
    ):
        buffer(capacity=100, num_envs=4, rate_limiter=rc.Queue(2))


def test_buffer_refuses_a_min_size_it_can_never_hold():
    with pytest.raises(
        InvalidArgumentError, match=r"waits for 200 windows but this table holds at most 100"
    ):
        buffer(capacity=100, rate_limiter=rc.MinSize(200))


def test_buffer_refuses_bad_limiter_and_max_times_sampled():
    with pytest.raises(InvalidArgumentError, match=r"must be a recollect.RateLimiter.*got int"):
        buffer(rate_limiter=3)
    with pytest.raises(InvalidArgumentError, match=r"max_times_sampled.*got max_times_sampled=-1"):
        buffer(max_times_sampled=-1)


def test_a_batch_the_limiter_can_never_allow_raises_instead_of_waiting():
    buf = buffer(rate_limiter=rc.Queue(4))
    buf.add_batch(step(1))
    with pytest.raises(InvalidArgumentError, match=r"samples of 5 window\(s\).*is less than 5"):
        buf.sample(5)


# -- default: no limiter, no blocking -------------------------------------------------
def test_without_limiter_sampling_too_early_raises_not_enough_data():
    buf = buffer()
    with pytest.raises(NotEnoughDataError, match="empty buffer"):
        buf.sample(4, timeout=10)
    for i in range(3):
        buf.add_batch(step(i))
    assert buf.sample(4).data["x"].shape == (4,)
    assert buf.info().rate_limiter is None


# -- single-thread misuse: a clear timeout, never a hang ---------------------------------
@pytest.mark.timeout(30)
def test_single_thread_sample_before_min_size_times_out_with_a_clear_message():
    buf = buffer(rate_limiter=rc.MinSize(5))
    buf.add_batch(step(0))
    t0 = time.monotonic()
    with pytest.raises(
        RateLimiterTimeout,
        match=r"sample blocked by MinSize\(min_size_to_sample=5\): .*inserts=1, samples=0, "
        r".*sampleable windows=1; .*at least 5 sampleable windows",
    ) as info:
        buf.sample(1, timeout=0.05)
    assert time.monotonic() - t0 < 5
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, RecollectError)


@pytest.mark.timeout(60)
def test_single_thread_insert_past_the_ratio_raises_even_without_timeout():
    # a fresh interpreter: no other Python thread exists that could ever unblock the insert
    code = textwrap.dedent(
        """
        import numpy as np, recollect as rc
        buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.int64)}, 100,
                              rate_limiter=rc.SampleToInsertRatio(1.0, 2, 2.0))
        try:
            for i in range(10):
                buf.add({"x": np.int64(i)})  # timeout=None: would hang forever, so it raises
        except rc.errors.RateLimiterTimeout as err:
            print("RAISED", buf.num_frames(), err)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(rc.__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, env=env
    )
    assert out.returncode == 0, out.stderr
    assert re.search(
        r"RAISED 4 insert blocked by SampleToInsertRatio.*no other thread is running.*"
        r"inserts=4, samples=0.*sample at least 1 more window",
        out.stdout,
    ), out.stdout


@pytest.mark.timeout(30)
def test_timeout_zero_never_waits_and_bad_timeout_is_refused():
    buf = buffer(rate_limiter=rc.Queue(1))
    buf.add_batch(step(0), timeout=0)
    with pytest.raises(RateLimiterTimeout, match=r"insert blocked by Queue\(size=1\)"):
        buf.add_batch(step(1), timeout=0)
    with pytest.raises(InvalidArgumentError, match=r"`timeout` must be None or seconds >= 0"):
        buf.add_batch(step(1), timeout=-1)


@pytest.mark.timeout(30)
def test_blocked_sample_resumes_when_a_writer_inserts():
    buf = buffer(rate_limiter=rc.MinSize(3))
    got = []

    def learner() -> None:
        got.append(buf.sample(2, timeout=20).data["x"])

    thread = threading.Thread(target=learner)
    thread.start()
    for i in range(3):
        time.sleep(0.02)
        buf.add_batch(step(i))
    thread.join(20)
    assert len(got) == 1 and got[0].shape == (2,)
    assert buf.info().sample_blocked_s > 0


@pytest.mark.timeout(30)
def test_close_wakes_every_waiter_with_state_error():
    buf = buffer(rate_limiter=rc.Queue(2), sampler=rc.Fifo(), max_times_sampled=1)
    buf.add_batch(step(0))
    buf.add_batch(step(1))
    errors = []

    def insert() -> None:
        try:
            buf.add_batch(step(2))
        except StateError as err:
            errors.append(err)

    threads = [threading.Thread(target=insert) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.1)
    buf.close()
    for thread in threads:
        thread.join(10)
    assert len(errors) == 3
    assert "closed while an insert of 1 waited on Queue(size=2)" in str(errors[0])
    assert buf.sample(2).data["x"].tolist() == [0, 1]  # allowed calls still run
    with pytest.raises(StateError, match=r"closed while a sample of 1 waited"):
        buf.sample(1)  # would wait for an item, but the buffer is closed


# -- checkpoints ------------------------------------------------------------------------
def test_restored_buffer_keeps_limiter_config_and_balance(tmp_path):
    buf = buffer(rate_limiter=rc.SampleToInsertRatio(2.0, 3, (0.0, 10.0)), max_times_sampled=50)
    for i in range(5):
        buf.add_batch(step(i))
    buf.sample(1)  # diff = 5 * 2 - 1 = 9
    path = buf.save(tmp_path / "ckpt")
    loaded = rc.ReplayBuffer.load(path)
    before, after = buf.info(), loaded.info()
    assert after.rate_limiter == before.rate_limiter
    assert (after.inserts, after.samples, after.max_times_sampled) == (5, 1, 50)
    assert after.samples_per_insert == pytest.approx(0.2)
    for b in (buf, loaded):  # the same balance: the same calls are refused and allowed
        with pytest.raises(RateLimiterTimeout, match=r"inserts=5, samples=1, .* = 9"):
            b.add_batch(step(9), timeout=0)
        b.sample(5, timeout=0)
        b.sample(4, timeout=0)
        with pytest.raises(RateLimiterTimeout, match=r"inserts=5, samples=10"):
            b.sample(1, timeout=0)


def test_info_reports_counters_and_inspect_prints_them(tmp_path):
    from click.testing import CliRunner

    from recollect.cli import main

    buf = buffer(rate_limiter=rc.MinSize(2))
    for i in range(4):
        buf.add_batch(step(i))
    buf.sample(6)
    info = buf.info()
    assert isinstance(info, rc.TableInfo)
    assert (info.size, info.capacity, info.inserts, info.samples) == (4, 1000, 4, 6)
    assert info.samples_per_insert == 1.5
    assert info.sampler == {"type": "Uniform", "config": {}}
    with pytest.raises(AttributeError):
        info.size = 3  # frozen
    path = buf.save(tmp_path / "ckpt")
    out = CliRunner().invoke(main, ["inspect", str(path), "--no-plot"])
    assert out.exit_code == 0, out.output
    assert "samples/insert 1.500" in out.output
    assert "MinSize(min_size_to_sample=2)" in out.output


# -- threads ----------------------------------------------------------------------------
@pytest.mark.slow  # about 4 s of threads: runs with CI=true / --run-slow
@pytest.mark.timeout(120)
def test_sample_to_insert_ratio_holds_under_four_writers_and_two_samplers():
    limiter = rc.SampleToInsertRatio(8, 1000, 200)
    buf = rc.ReplayBuffer(SPEC, 4000, 4, rng=0, rate_limiter=limiter)
    total, per_writer = 20_000, 5_000
    violations: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def check() -> None:
        with buf.writer.lock:
            info = buf.info()
            diff = info.inserts * 8 - info.samples
            if info.inserts >= 1000 and not (7800 <= diff <= 8200):
                violations.append(f"inserts={info.inserts} samples={info.samples} diff={diff}")

    def writer(row: int) -> None:
        try:
            batch = step(row)
            for _ in range(per_writer):
                buf.add_batch(batch, rows=[row], timeout=60)
                check()
        except BaseException as err:
            errors.append(err)

    def sampler() -> None:
        try:
            while not stop.is_set():
                try:
                    buf.sample(32, timeout=0.5)
                except RateLimiterTimeout:
                    continue
                check()
        except StateError:
            return
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(r,)) for r in range(4)]
    threads += [threading.Thread(target=sampler) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads[:4]:
        thread.join(100)
    stop.set()
    buf.close()
    for thread in threads[4:]:
        thread.join(10)
    assert not errors, errors
    assert not violations, violations[:5]
    info = buf.info()
    assert info.inserts == total
    assert 7800 <= total * 8 - info.samples <= 8200


@pytest.mark.slow  # about 12 s: runs with CI=true / --run-slow
@pytest.mark.timeout(120)
def test_queue_delivers_every_item_once_in_order_per_producer():
    num, per = 3, 10_000
    buf = rc.ReplayBuffer(
        SPEC, 3 * 200, num, rng=0, sampler=rc.Fifo(), max_times_sampled=1,
        rate_limiter=rc.Queue(100),
    )  # fmt: skip
    received: list[list[np.ndarray]] = [[] for _ in range(num)]
    errors: list[BaseException] = []

    def producer(row: int) -> None:
        try:
            for i in range(per):
                buf.add_batch({"x": np.array([row * per + i]), "y": np.zeros((1, 2))}, rows=[row])
        except BaseException as err:
            errors.append(err)

    def consumer(k: int) -> None:
        while True:
            try:
                s = buf.sample(1 + k)
            except StateError:
                return
            except BaseException as err:
                errors.append(err)
                return
            received[k].append(s.data["x"])

    producers = [threading.Thread(target=producer, args=(r,)) for r in range(num)]
    consumers = [threading.Thread(target=consumer, args=(k,)) for k in range(num)]
    for thread in producers + consumers:
        thread.start()
    for thread in producers:
        thread.join(100)
    deadline = time.monotonic() + 30
    while buf.info().samples < num * per and time.monotonic() < deadline:
        time.sleep(0.01)
    buf.close()
    for thread in consumers:
        thread.join(10)
    assert not errors, errors
    items = np.concatenate([np.concatenate(r) for r in received if r])
    assert np.sort(items).tolist() == list(range(num * per))  # each exactly once
    for k in range(num):  # per consumer, each producer's items arrive in order
        got = np.concatenate(received[k]) if received[k] else np.zeros(0, np.int64)
        for row in range(num):
            mine = got[got // per == row]
            assert (np.diff(mine) > 0).all()
    assert buf.info().deletes == num * per


@pytest.mark.timeout(60)
def test_prefetching_learner_blocks_then_stops_cleanly_on_close():
    from recollect.adapters.prefetch import Prefetcher, draw_concurrent

    buf = buffer(rate_limiter=rc.MinSize(4))
    it = Prefetcher(lambda: draw_concurrent(buf, 2, None), 2, lambda: buf.closed, threads=2)
    got = []

    def learner() -> None:
        got.extend(s.data["x"].shape for s in it)

    thread = threading.Thread(target=learner)
    thread.start()
    time.sleep(0.2)
    assert not got  # blocked, not failing
    for i in range(4):
        buf.add_batch(step(i))
    time.sleep(0.2)
    assert got
    buf.close()
    thread.join(10)
    assert not thread.is_alive()
    it.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("adapter", ["torch", "jax", "tf_data"])
def test_adapter_iterators_block_on_the_limiter_and_end_on_close(adapter):
    buf = buffer(rate_limiter=rc.MinSize(4))
    if adapter == "torch":
        torch_adapter = pytest.importorskip("recollect.torch")
        it = iter(torch_adapter.ReplayDataset(buf, 2))
    elif adapter == "jax":
        jax_adapter = pytest.importorskip("recollect.jax")
        it = jax_adapter.as_iterator(buf, 2)
    else:
        tf_data = pytest.importorskip("recollect.tf_data")
        it = iter(tf_data.as_dataset(buf, sample_batch_size=2))
    got: list = []
    errors: list[BaseException] = []

    def learner() -> None:
        try:
            for item in it:
                got.append(item)
        except BaseException as err:  # surfaced by the assert below
            errors.append(err)

    thread = threading.Thread(target=learner)
    thread.start()
    time.sleep(0.3)
    assert not got and not errors  # waiting for data, not failing
    for i in range(4):
        buf.add_batch(step(i))
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got
    buf.close()
    thread.join(20)
    assert not thread.is_alive()
    assert not errors, errors
