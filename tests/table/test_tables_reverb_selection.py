"""Reverb's selection semantics: one selection per item, max_times_sampled within a batch,
deterministic selectors filling a batch, heap ties in update order (issue 26, items 1-3, 7)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import recollect as rc
from recollect.samplers.heap_tree import TopTree

SPEC = {"x": rc.ArraySpec((), np.int64)}


def table(sampler: rc.Sampler, items: int = 8, max_times: int = 0, **kw) -> rc.ReplayBuffer:
    """One row holding items 0..items-1 (the data is the item number)."""
    seq = {"sequence_length": 1} if isinstance(sampler, rc.Prioritized) else {}
    buf = rc.ReplayBuffer(
        SPEC, 16, sampler=sampler, max_times_sampled=max_times, rng=kw.pop("rng", 0), **seq, **kw
    )
    for i in range(items):
        buf.add({"x": i})
    return buf


def ids_of(buf: rc.ReplayBuffer) -> np.ndarray:
    return buf.reader.item_ids().reshape(-1)


# -- item 1: max_times_sampled per item ------------------------------------------------
def test_uniform_max_times_one_returns_distinct_items_and_empties_the_table():
    buf = table(rc.Uniform(), max_times=1)
    s = buf.sample(8)
    assert sorted(s.data["x"].tolist()) == list(range(8))  # Reverb: 8 distinct, table empty
    assert buf.info().size == 0 and buf.info().deletes == 8
    assert s.times_sampled.tolist() == [1] * 8


def test_fifo_max_times_two_gives_each_window_twice_in_order():
    buf = table(rc.Fifo(), max_times=2)
    assert buf.sample(3).data["x"].tolist() == [0, 0, 1]  # Reverb's [0, 0, 1]
    assert buf.sample(3).data["x"].tolist() == [1, 2, 2]
    assert buf.sample(3).times_sampled.tolist() == [1, 2, 1]


def test_a_window_is_never_delivered_more_than_max_times_within_a_batch():
    for seed in range(20):
        buf = table(rc.Uniform(), items=6, max_times=3, rng=seed)
        s = buf.sample(18)  # exactly the allowance: every window 3 times
        assert np.bincount(s.data["x"], minlength=6).tolist() == [3] * 6
        assert buf.info().size == 0


def test_a_batch_larger_than_the_allowance_raises_and_draws_nothing():
    buf = table(rc.Uniform(), items=3, max_times=2)
    state = buf.reader.rng.bit_generator.state
    with pytest.raises(rc.errors.NotEnoughDataError, match=r"allow fewer .*max_times_sampled=2"):
        buf.sample(7)
    assert buf.info().samples == 0 and buf.info().size == 3
    assert buf.reader.rng.bit_generator.state == state


def _pair_counts(make, trials: int, items: int) -> np.ndarray:
    counts = np.zeros((items, items))
    for seed in range(trials):
        first, second = make(seed).sample(2).data["x"]
        counts[first, second] += 1
    return counts


@pytest.mark.slow  # about 5 s of draws: runs with CI=true / --run-slow
def test_uniform_max_times_one_is_sampling_without_replacement_chi_square():
    counts = _pair_counts(lambda seed: table(rc.Uniform(), 4, 1, rng=seed), 3000, 4)
    assert np.trace(counts) == 0  # never the same window twice
    observed = counts[~np.eye(4, dtype=bool)]
    assert stats.chisquare(observed).pvalue > 1e-3  # all 12 ordered pairs alike


@pytest.mark.slow  # about 4 s: runs with CI=true / --run-slow
def test_prioritized_max_times_one_is_successive_sampling_chi_square():
    p = np.array([1.0, 2.0, 3.0, 4.0])

    def make(seed: int) -> rc.ReplayBuffer:
        buf = table(rc.Prioritized(1.0, 0.0), 4, 1, rng=seed)
        buf.update_priorities(ids_of(buf), p)
        return buf

    counts = _pair_counts(make, 3000, 4)
    q = p / p.sum()
    expected = np.array(
        [[q[i] * q[j] / (1 - q[i]) if i != j else 0.0 for j in range(4)] for i in range(4)]
    )
    mask = ~np.eye(4, dtype=bool)
    assert np.trace(counts) == 0
    assert stats.chisquare(counts[mask], expected[mask] * counts.sum()).pvalue > 1e-3


# -- item 2: deterministic selectors fill a batch one selection per item -----------------
@pytest.mark.parametrize(
    ("sampler", "expected"),
    [(rc.Fifo(), [0, 0, 0]), (rc.Lifo(), [7, 7, 7]), (rc.MaxHeap(), [3, 3, 3])],
)
def test_deterministic_selectors_return_the_top_item_b_times(sampler, expected):
    buf = table(sampler, items=8)
    if isinstance(sampler, rc.MaxHeap):
        buf.update_priorities(ids_of(buf), [1, 2, 3, 9, 4, 5, 6, 7])
    assert buf.sample(3).data["x"].tolist() == expected
    assert buf.sample(3).data["x"].tolist() == expected  # nothing removed
    assert buf.info().size == 8


def test_min_heap_top_item_b_times_then_in_order_with_max_times_one():
    buf = table(rc.MinHeap(), items=12)
    buf.update_priorities(ids_of(buf), [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1])
    assert buf.sample(3).data["x"].tolist() == [11, 11, 11]  # Reverb's MinHeap example
    once = table(rc.MinHeap(), items=12, max_times=1)
    once.update_priorities(ids_of(once), [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 1])
    assert once.sample(4).data["x"].tolist() == [11, 0, 1, 2]


# -- item 3: heap ties broken by update order ----------------------------------------------
@pytest.mark.parametrize("sampler_cls", [rc.MinHeap, rc.MaxHeap])
def test_heap_ties_go_in_update_order_most_recent_last(sampler_cls, tmp_path):
    buf = table(sampler_cls(), items=3, max_times=1)
    ids = ids_of(buf)
    buf.update_priorities(ids[[2, 0, 1]], [1.0, 1.0, 1.0])
    buf.update_priorities(ids[[2]], [1.0])  # 2 updated again: it goes last
    assert buf.sample(3).data["x"].tolist() == [0, 1, 2]  # the Reverb check
    buf = table(sampler_cls(), items=3, max_times=1)  # all at the initial priority 1
    buf.update_priorities(ids_of(buf)[[0]], [1.0])  # the oldest, updated: now last
    buf.save(tmp_path / "heap")
    assert buf.sample(3).data["x"].tolist() == [1, 2, 0]  # by age it would be [0, 1, 2]
    restored = rc.ReplayBuffer.load(tmp_path / "heap")  # the update order is checkpointed
    assert restored.sample(3).data["x"].tolist() == [1, 2, 0]


def test_heap_fresh_ties_go_in_insert_order():
    buf = table(rc.MaxHeap(), items=5, max_times=1)
    assert buf.sample(5).data["x"].tolist() == [0, 1, 2, 3, 4]


# -- item 7: the tournament tree, against a sort -----------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 700),
    data=st.data(),
)
def test_top_tree_best_matches_a_lexicographic_sort(capacity, data):
    tree = TopTree(capacity)
    primary = np.full(capacity, np.inf)
    stamp = np.zeros(capacity, np.int64)
    clock = itertools.count()
    for _ in range(data.draw(st.integers(1, 4))):
        keys = np.array(
            data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=40, unique=True))
        )
        empty = np.array(data.draw(st.lists(st.booleans(), min_size=len(keys),
                                            max_size=len(keys))))  # fmt: skip
        values = np.where(empty, np.inf, np.array([float(data.draw(st.integers(0, 3)))
                                                   for _ in keys]))  # fmt: skip
        stamps = np.array([next(clock) for _ in keys])
        tree.set(keys, values, stamps)
        primary[keys], stamp[keys] = values, stamps
        live = np.flatnonzero(np.isfinite(primary))
        if len(live):
            k = data.draw(st.integers(1, len(live)))
            order = live[np.lexsort((stamp[live], primary[live]))]
            assert tree.best(k).tolist() == order[:k].tolist()
