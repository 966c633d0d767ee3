"""How many threads copy a large gather: one rule of the machine's load, never timings.

A default :class:`Gatherer` splits a large leaf gather over ``1 + round(usable CPUs -
1-minute load average)`` threads (clipped to ``[1, threads]``); a count given to it (or
in ``RECOLLECT_GATHER_THREADS``) is used as is. The old gatherer picked one or several
threads by measured throughput, alternating while it measured: the choice changed from
run to run (issue #40).
"""

from __future__ import annotations

import numpy as np
import pytest

import recollect.storage.gather as gather_module
from recollect.storage.gather import Gatherer, copy_threads


@pytest.mark.parametrize(
    ("cap", "cpus", "load", "expected"),
    [
        (2, 2, 1.0, 2),  # idle 2-CPU machine: the load is the calling thread
        (2, 2, 1.4, 2),
        (2, 2, 1.6, 1),  # another process busy half the time or more
        (2, 2, 2.0, 1),
        (2, 2, 7.5, 1),  # oversubscribed
        (4, 16, 1.0, 4),  # capped
        (4, 16, 13.0, 4),
        (4, 16, 14.0, 3),
        (4, 2, 0.0, 3),
    ],
)
def test_copy_threads_is_one_plus_the_idle_cpus_clipped(cap, cpus, load, expected):
    assert copy_threads(cap, cpus, load) == expected


def _split_counts(monkeypatch, gatherer: Gatherer, calls: int = 40) -> list[int | None]:
    """Gathers ``calls`` times; returns the thread count of each split (None: one thread)."""
    monkeypatch.setattr(gather_module, "PARALLEL_MIN_BYTES", 1)
    used: list[int | None] = []
    take = gatherer.pool.take

    def recording_take(src, flat, out, nbytes, threads=None):
        if threads is None:  # all of the pool's threads
            used.append(gatherer.pool.threads)
            take(src, flat, out, nbytes)
        else:
            used.append(threads)
            take(src, flat, out, nbytes, threads)

    monkeypatch.setattr(gatherer.pool, "take", recording_take)
    rng = np.random.default_rng(0)
    view = rng.integers(0, 255, (300, 64), dtype=np.uint8)
    for _ in range(calls):
        before = len(used)
        index = rng.integers(0, 300, 200)
        (got,) = gatherer.gather([view], index)
        np.testing.assert_array_equal(got, view[index])
        if len(used) == before:
            used.append(None)
    return used


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.delenv("RECOLLECT_GATHER_THREADS", raising=False)
    monkeypatch.setattr(gather_module, "_usable_cpus", lambda: 2, raising=False)


def test_a_loaded_machine_copies_every_large_gather_on_the_calling_thread(monkeypatch, two_cpus):
    monkeypatch.setattr(gather_module.os, "getloadavg", lambda: (4.0, 4.0, 4.0))
    gatherer = Gatherer()
    assert gatherer.threads == 2
    assert _split_counts(monkeypatch, gatherer) == [None] * 40


def test_an_idle_machine_splits_every_large_gather_over_both_cpus(monkeypatch, two_cpus):
    monkeypatch.setattr(gather_module.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert _split_counts(monkeypatch, Gatherer()) == [2] * 40


def test_the_load_is_read_again_after_load_check_s(monkeypatch, two_cpus):
    loads = iter([(1.0,) * 3, (3.0,) * 3])
    monkeypatch.setattr(gather_module.os, "getloadavg", lambda: next(loads))
    clock = [100.0]
    monkeypatch.setattr(gather_module.time, "monotonic", lambda: clock[0])
    gatherer = Gatherer()
    assert gatherer.threads_now() == 2
    clock[0] += gather_module.LOAD_CHECK_S / 2
    assert gatherer.threads_now() == 2  # not read again yet
    clock[0] += gather_module.LOAD_CHECK_S
    assert gatherer.threads_now() == 1


def test_a_given_count_is_used_whatever_the_load(monkeypatch, two_cpus):
    monkeypatch.setattr(gather_module.os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    assert _split_counts(monkeypatch, Gatherer(threads=3)) == [3] * 40
    monkeypatch.setenv("RECOLLECT_GATHER_THREADS", "2")
    gatherer = Gatherer()
    assert not gatherer.adaptive
    assert _split_counts(monkeypatch, gatherer) == [2] * 40


def test_no_load_average_uses_the_cap(monkeypatch, two_cpus):
    def missing() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(gather_module.os, "getloadavg", missing)
    assert Gatherer().threads_now() == 2
