"""Deleting windows (Reverb: mutate_priorities deletes), locally and over shards (item 6)."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect import ids as id_layout
from recollect.service import Server

SPEC = {"x": rc.ArraySpec((), np.int64)}


def filled(sampler=None, items: int = 8, capacity: int = 8, **kw) -> rc.ReplayBuffer:
    seq = {"sequence_length": 1} if isinstance(sampler, rc.Prioritized) else {}
    buf = rc.ReplayBuffer(SPEC, capacity, sampler=sampler, rng=0, **seq, **kw)
    for i in range(items):
        buf.add({"x": i})
    return buf


@pytest.mark.parametrize("sampler", [None, rc.Prioritized(0.6), rc.MaxHeap(), rc.Fifo(), rc.Lifo()])
def test_a_deleted_window_is_never_sampled_again(sampler):
    buf = filled(sampler)
    ids = buf.reader.item_ids().reshape(-1)
    assert buf.delete(ids[[0, 3, 7]]) == 0
    info = buf.info()
    assert info.size == 5 and info.deletes == 3
    drawn = np.concatenate([buf.sample(16).data["x"] for _ in range(20)])
    assert not np.isin(drawn, [0, 3, 7]).any()
    assert buf.delete(ids) == 3  # the deleted ones are skipped now
    assert buf.info().size == 0
    with pytest.raises(rc.errors.NotEnoughDataError):
        buf.sample(1)


def test_stale_unknown_and_foreign_ids_are_skipped_and_counted():
    buf = filled(items=12)  # capacity 8: times 0-3 overwritten
    ids = buf.reader.item_ids().reshape(-1)
    stale = id_layout.encode(0, 1)
    future = id_layout.encode(0, 40)
    other_shard = id_layout.encode(0, 9, 3)
    no_row = id_layout.encode(5, 9)
    assert buf.delete(np.r_[stale, future, other_shard, no_row, ids[0], ids[0]]) == 5
    assert buf.info().deletes == 1
    assert buf.delete(np.zeros(0, np.int64)) == 0


def test_a_window_that_is_not_complete_or_crosses_an_episode_end_is_skipped():
    spec = {"x": rc.ArraySpec((), np.int64), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(spec, 8, sequence_length=2)
    for i, end in enumerate([False, True, False, False]):
        buf.add({"x": i, "is_last": end})
    # windows of 2: starts 0 (0-1) and 2 (2-3); 1 crosses the end, 3 is not complete
    assert buf.delete(id_layout.encode(np.zeros(4, int), np.arange(4))) == 2
    assert buf.info().size == 0


def test_bad_ids_are_refused_and_nothing_is_deleted():
    buf = filled()
    with pytest.raises(rc.errors.InvalidArgumentError, match="1-D integer ids"):
        buf.delete(np.array([[0, 1]]))
    with pytest.raises(rc.errors.InvalidArgumentError, match=r"dtype float64"):
        buf.delete(np.array([0.0, 1.0]))
    assert buf.info().deletes == 0


def test_prioritized_delete_drops_the_window_from_the_priority_sum():
    buf = filled(rc.Prioritized(1.0, 0.0))
    ids = buf.reader.item_ids().reshape(-1)
    buf.update_priorities(ids, np.arange(1.0, 9.0))
    buf.delete(ids[[7]])
    assert buf.table.sampling_weight()[0] == pytest.approx(sum(range(1, 8)))
    s = buf.sample(4, importance_sampling_exponent=1.0)
    np.testing.assert_allclose(s.probabilities, s.priorities / 28.0)


def test_a_delete_blocks_a_sample_as_in_reverb():
    buf = filled(items=3, rate_limiter=rc.MinSize(3))
    buf.sample(1, timeout=0)
    buf.delete(buf.reader.item_ids().reshape(-1)[:1])
    with pytest.raises(rc.errors.RateLimiterTimeout):
        buf.sample(1, timeout=0)


def test_a_delete_unblocks_an_insert_as_in_reverb():
    limiter = rc.RateLimiter(1.0, 3, min_diff=-10.0, max_diff=0.0)
    buf = rc.ReplayBuffer(SPEC, 8, rate_limiter=limiter, rng=0)
    for i in range(3):  # free while filling up to min_size_to_sample
        buf.add({"x": i})
    with pytest.raises(rc.errors.RateLimiterTimeout):
        buf.add({"x": 3}, timeout=0)  # full and the balance is past max_diff
    buf.delete(buf.reader.item_ids().reshape(-1)[:1])
    buf.add({"x": 3}, timeout=0)  # size 2 + 1 <= 3: filling up again


def test_client_delete_routes_ids_to_their_shards():
    server = Server({"t": rc.ReplayBuffer(SPEC, 8 * 4, 8)}, num_shards=4)
    client = server.client(rng=0)
    for shard in server.shards["t"]:
        for i in range(4):
            shard.buffer.add_batch({"x": np.full(2, i)})
    ids = np.concatenate([s.buffer.reader.item_ids().reshape(-1) for s in server.shards["t"]])
    foreign = id_layout.encode(0, 0, 9)
    assert client.delete("t", np.r_[ids[::2], foreign]) == 1
    info = client.info("t")
    assert info.deletes == len(ids[::2]) and info.size == 32 - len(ids[::2])
    assert [s.deletes for s in info.shards] == [4, 4, 4, 4]
    left = set(ids[1::2].tolist())
    for _ in range(10):
        assert set(client.sample("t", 16).ids.tolist()) <= left
    assert client.table("t").delete(ids[1::2]) == 0
    assert client.info("t").size == 0
    with pytest.raises(rc.errors.InvalidArgumentError, match="1-D integer ids"):
        client.delete("t", [[1]])
    server.close()


def test_sampling_after_every_window_was_deleted_says_so():
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, 8, 1, rng=0)
    for i in range(5):
        buf.add_batch({"x": np.array([i], np.float32)})
    for _ in range(5):
        buf.delete(buf.sample(1).ids)
    with pytest.raises(rc.errors.NotEnoughDataError, match="every stored window was deleted"):
        buf.sample(1)
