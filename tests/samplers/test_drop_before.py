"""``Sampler.drop_before`` (issue 37): a sampler forgets the windows a cleared index no longer
holds, the operation a memmap reopen with ``recover=True`` needs (instead of editing the
sampler's state dict from outside)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.samplers.windows import WindowIndex
from recollect.table import Table

SAMPLERS = {
    "prioritized": lambda: rc.Prioritized(0.6),
    "prioritized-alpha0": lambda: rc.Prioritized(0.0),
    "batch-normalised": lambda: rc.Prioritized(0.6, weight_normalization="batch"),
    "min-heap": lambda: rc.MinHeap(),
    "max-heap": lambda: rc.MaxHeap(),
}


def _table(make, seq: int, steps: int, ends: list[bool], seed: int) -> Table:
    table = Table(3, 8, sampler=make(), sequence_length=seq, episode_aware=True, rng=seed)
    rng = np.random.default_rng(seed)
    for k in range(steps):
        table.insert(None, None, np.array([ends[k % len(ends)], False, k % 3 == 0]))
    if table.size():  # distinct priorities, so heaps and weights see them
        draw = table.draw(4)
        table.update_priorities(draw.ids, rng.random(4) * 3)
    return table


def _cleared(table: Table, before: np.ndarray) -> Table:
    """``table`` restored with its index cleared before ``before`` (the memmap recover path),
    the sampler told through ``drop_before``."""
    state = table.state_dict()
    state["index"] = WindowIndex.cleared_state(state["index"], before)
    make = type(table.sampler)
    other = Table(
        3,
        8,
        sampler=make(**table.sampler.get_config()),
        sequence_length=table.sequence_length,
        episode_aware=True,
    )
    with other.lock:
        other.load_state_dict(state)
        other.sampler.drop_before(np.maximum(before, other.clocks - other.max_length))
    return other


@pytest.mark.parametrize("name", sorted(SAMPLERS))
@settings(max_examples=25, deadline=None)
@given(
    seq=st.integers(1, 3),
    steps=st.integers(0, 20),
    ends=st.lists(st.booleans(), min_size=1, max_size=5),
    cut=st.lists(st.integers(0, 20), min_size=3, max_size=3),
    seed=st.integers(0, 10),
)
def test_drop_before_keeps_exactly_the_windows_the_cleared_index_holds(
    name, seq, steps, ends, cut, seed
):
    table = _table(SAMPLERS[name], seq, steps, ends, seed)
    before = np.minimum(np.asarray(cut, np.int64), table.clocks)
    other = _cleared(table, before)
    sampler = other.sampler
    seg = other.index.segments(seq, True)
    rows, times = seg.enumerate()
    keys = np.sort(rows * other.max_length + times % other.max_length)
    # every window the index holds keeps its value; every other one has none
    assert sampler.num_valid == len(keys)
    np.testing.assert_array_equal(np.flatnonzero(sampler._tree.values > 0), keys)
    old = table.sampler._tree.values
    np.testing.assert_array_equal(sampler._tree.values[keys], old[keys])
    if not len(keys):
        return
    draw = other.draw(16)
    assert (draw.times >= before[draw.rows]).all()
    assert set(zip(draw.rows.tolist(), draw.times.tolist(), strict=True)) <= set(
        zip(rows.tolist(), times.tolist(), strict=True)
    )
    # the state round-trips as that of a table that never held the dropped windows
    again = _cleared(other, before)
    np.testing.assert_array_equal(again.sampler._tree.values, sampler._tree.values)
    assert again.sampler.state_dict().keys() == sampler.state_dict().keys()


@pytest.mark.parametrize("name", ["min-heap", "max-heap"])
def test_a_heap_never_returns_a_dropped_window(name):
    table = _table(SAMPLERS[name], 1, 8, [False], 0)
    best = int(table.draw(1).rows[0])
    before = np.where(np.arange(3) == best, 8, 0)  # every window of the best one's row
    table.sampler.drop_before(before)
    assert table.sampler.num_valid == 16
    draw = table.sampler.sample(16, 1, True, table.rng)  # the 16 left, best first
    assert best not in draw.rows.tolist()
    assert len(set(zip(draw.rows.tolist(), draw.times.tolist(), strict=True))) == 16


def test_the_default_drop_before_changes_nothing():
    table = Table(2, 8, sampler=rc.Uniform(), rng=0)
    for _ in range(5):
        table.insert(None, None, None)
    before = table.sampler.state_dict()
    table.sampler.drop_before(np.array([3, 3]))
    assert table.sampler.state_dict() == before
    assert table.size() == 10
