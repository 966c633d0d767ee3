"""Read-ahead of ``recollect.tf_data`` drops what it drew before any change of what a draw may
return, as it does for writes: deletes, priority updates, clears and loads (issue 35 item 2).

Both read-ahead paths tag what they draw ahead with the table's ``version``; a
delete or a priority update used to leave it unchanged, so the chunk drawn ahead (graph
path) and the batches prefetched (eager path) served deleted windows and old priorities.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect import (  # noqa: E402
    ArraySpec,
    Prioritized,
    ReplayBuffer,
)
from recollect.adapters import tf_data  # noqa: E402
from recollect.adapters.tf_data import chunks as _tf_chunks  # noqa: E402
from recollect.adapters.tf_data import eager as _tf_eager  # noqa: E402
from recollect.errors import NotEnoughDataError  # noqa: E402

N = 64  # one row of 64 one-step windows: id == time
BATCH = 16  # a batch avoids the 32 unsampleable windows with probability 2**-16
MOST = 16
HALF = np.arange(N // 2, dtype=np.int64)  # the ids made unsampleable (times 0..31)
CASES = [
    ("uniform", "delete"),
    ("uniform", "clear"),
    ("uniform", "load"),
    ("prioritized", "delete"),
    ("prioritized", "priorities"),
    ("prioritized", "clear"),
    ("prioritized", "load"),
]


def _buffer(sampler, offset=0.0):
    kwargs = {}
    if sampler == "prioritized":  # epsilon 0: a priority of 0 is never drawn
        kwargs = {"sampler": Prioritized(1.0, epsilon=0.0), "sequence_length": 1}
    buf = ReplayBuffer({"x": ArraySpec((), np.float64)}, N, num_envs=1, rng=0, **kwargs)
    for t in range(N):
        buf.add_batch({"x": np.array([t + offset])})
    return buf


def _mutate(buf, sampler, mutation):
    """Applies ``mutation``; returns ``check(x, ids)`` of what may be served afterwards."""
    if mutation in ("delete", "priorities"):
        if mutation == "delete":
            assert buf.delete(HALF) == 0
        else:
            assert buf.update_priorities(HALF, np.zeros(len(HALF))) == 0
        return lambda x, ids: not np.isin(ids, HALF).any()
    if mutation == "clear":
        buf.clear()
        return None  # nothing may be served: the next draw raises
    buf.load_state_dict(_buffer(sampler, offset=1000.0).state_dict())
    return lambda x, ids: (x >= 1000).all()


@pytest.mark.parametrize(("sampler", "mutation"), CASES)
def test_graph_path_never_takes_the_chunk_drawn_ahead_of_a_change(sampler, mutation):
    buf = _buffer(sampler)
    fn = _tf_chunks.chunked_sample_fn(buf, BATCH, None, MOST, None)

    def call():
        items, info, _, ok = fn(tf.constant(0, tf.int64))
        assert bool(ok)
        return items["x"].numpy(), info.ids.numpy()

    for _ in range(6):  # reading only: chunks grow and the next one is drawn ahead
        call()
    time.sleep(0.1)  # the chunk drawn ahead is ready
    check = _mutate(buf, sampler, mutation)
    if check is None:
        with pytest.raises(NotEnoughDataError, match="empty buffer"):
            call()
        return
    for _ in range(4):  # the call after the change, then reading only again (read-ahead)
        x, ids = call()
        assert check(x, ids), (mutation, np.unique(ids))


@pytest.mark.parametrize(("sampler", "mutation"), CASES)
def test_eager_path_never_serves_a_batch_prefetched_before_a_change(sampler, mutation, monkeypatch):
    monkeypatch.setattr(_tf_eager, "INLINE_BELOW_BYTES", 0)  # prefetch even small elements
    buf = _buffer(sampler)
    iterator = iter(tf_data.as_dataset(buf, BATCH))
    assert isinstance(iterator, _tf_eager.EagerSampleIterator)
    for _ in range(3):
        next(iterator)
    time.sleep(0.1)  # EAGER_PREFETCH batches are ready, drawn before the change
    check = _mutate(buf, sampler, mutation)
    if check is None:
        with pytest.raises(tf.errors.UnknownError, match="NotEnoughDataError"):
            next(iterator)
        return
    for _ in range(2 * _tf_eager.EAGER_PREFETCH):
        items, info = next(iterator)
        x, ids = items["x"].numpy(), info.ids.numpy()
        assert check(x, ids), (mutation, np.unique(ids))


@pytest.mark.parametrize(("sampler", "mutation"), [CASES[0], CASES[4]])
def test_pipeline_serves_at_most_the_rest_of_its_chunk_after_a_change(sampler, mutation):
    """The documented bound for writes holds for deletes and priority updates: what the
    current chunk still holds (fewer than ``MAX_CHUNK`` elements), never the next chunk."""
    buf = _buffer(sampler)
    iterator = iter(tf_data.as_dataset(buf, BATCH).map(lambda items, info: (items, info)))
    for _ in range(100):  # chunks of 1, 2, .. 32 (63 elements), then 37 of a chunk of 64
        next(iterator)
    time.sleep(0.1)  # the next chunk of 64 is drawn ahead
    check = _mutate(buf, sampler, mutation)
    stale = [
        k
        for k in range(3 * tf_data.MAX_CHUNK)
        if not check(*(lambda i, b: (i["x"].numpy(), b.ids.numpy()))(*next(iterator)))
    ]
    assert stale, "the rest of the current chunk predates the change"
    assert max(stale) < tf_data.MAX_CHUNK - 37, stale


def test_table_version_moves_with_every_change_of_what_may_be_drawn_and_only_then():
    """Every mutation moves ``version``; a draw does not; deletes and priority updates leave
    ``generation`` (the "was a drawn step overwritten" check of is_stale) as it was."""
    buf = _buffer("prioritized")
    table, index = buf.table, buf.table.index

    def moved(change):
        before = (table.version, index.generation)
        change()
        return table.version > before[0], index.generation > before[1]

    assert moved(lambda: buf.sample(BATCH)) == (False, False)
    assert moved(lambda: buf.delete(HALF[:4])) == (True, False)
    assert moved(lambda: buf.update_priorities(HALF[8:12], np.ones(4))) == (True, False)
    assert moved(lambda: buf.add_batch({"x": np.array([1.0])})) == (True, True)
    assert moved(lambda: buf.load_state_dict(_buffer("prioritized").state_dict())) == (True, True)
    assert moved(buf.clear) == (True, True)


def test_a_draws_own_removals_invalidate_nothing():
    """``max_times_sampled=1``: the eager prefetcher serves every window exactly once (a
    batch dropped as stale would lose its windows) and the graph chunks still grow."""
    buf = ReplayBuffer({"x": ArraySpec((), np.float64)}, N, num_envs=1, max_times_sampled=1)
    for t in range(N):
        buf.add_batch({"x": np.array([float(t)])})
    version = buf.table.version
    fn = _tf_chunks.chunked_sample_fn(buf, 1, None, MOST, None)
    sizes = [int(fn(tf.constant(0, tf.int64))[0]["x"].shape[0]) for _ in range(4)]
    assert sizes == [1, 2, 4, 8]
    assert buf.table.version == version
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tf_eager, "INLINE_BELOW_BYTES", 0)
        iterator = iter(tf_data.as_dataset(buf, 1))
        served = [int(next(iterator)[1].ids.numpy()[0]) for _ in range(N - sum(sizes))]
    assert len(set(served)) == len(served) == N - sum(sizes)  # every window left, once


@pytest.mark.parametrize("change", ["write", "delete", "priorities"])
def test_eager_path_loses_no_window_of_a_table_whose_draws_remove(monkeypatch, change):
    """``max_times_sampled=1`` and a change between reads, then reads to the end: every
    window was served once or deleted (a prefetched batch dropped as stale used to take
    the windows its draw removed with it)."""
    monkeypatch.setattr(_tf_eager, "INLINE_BELOW_BYTES", 0)  # would prefetch even small elements
    buf = ReplayBuffer(
        {"x": ArraySpec((), np.float64)},
        2 * N,  # room for the writes below: nothing is overwritten
        num_envs=1,
        rng=0,
        max_times_sampled=1,
        sampler=Prioritized(1.0, epsilon=0.0),
        sequence_length=1,
    )
    for t in range(N):
        buf.add_batch({"x": np.array([float(t)])})
    iterator = iter(tf_data.as_dataset(buf, 2))
    served, deleted, written = [], 0, N
    for k in range(12):
        served += [int(i) for i in next(iterator)[1].ids.numpy()]
        time.sleep(0.01)  # a prefetcher would have its next batches drawn by now
        if change == "write":
            buf.add_batch({"x": np.array([-1.0])})
            written += 1
        elif change == "delete":
            deleted += 1 - buf.delete(np.array([N - 1 - k], np.int64))  # the newest windows
        else:
            buf.update_priorities(np.array(served[-1:], np.int64), np.ones(1))
    with pytest.raises(tf.errors.UnknownError, match="NotEnoughDataError"):
        while True:  # to the end: fewer than 2 windows left
            served += [int(i) for i in next(iterator)[1].ids.numpy()]
    assert len(set(served)) == len(served)
    left = written - buf.table.index.removed
    assert left in (0, 1)
    assert len(served) + deleted + left == written  # served, deleted or still there
