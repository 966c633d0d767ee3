"""SumTree against a brute-force reference (np.cumsum + searchsorted)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recollect.samplers.sum_tree import SumTree


def reference_find(values: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.cumsum(values), targets, side="right")


@st.composite
def tree_ops(draw):
    capacity = draw(st.integers(1, 300))
    branching = draw(st.integers(2, 9))
    updates = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, capacity - 1), st.integers(0, 20)), max_size=40),
            min_size=1,
            max_size=6,
        )
    )
    return capacity, branching, updates


@settings(max_examples=150, deadline=None)
@given(tree_ops())
def test_batch_set_and_find_match_brute_force(ops):
    capacity, branching, updates = ops
    tree = SumTree(capacity, branching)
    reference = np.zeros(capacity)
    for update in updates:
        idx = np.array([i for i, _ in update], dtype=np.int64)
        val = np.array([v for _, v in update], dtype=np.float64)
        tree.set(idx, val)
        for i, v in update:  # sequential: the last write of a repeated index wins
            reference[i] = v
        np.testing.assert_array_equal(tree.values, reference)
        assert tree.total == reference.sum()
        total = int(reference.sum())
        if total:  # integer values: sums are exact, so the search must match exactly
            targets = np.concatenate([np.arange(total) + 0.5, np.arange(total, dtype=float)])
            np.testing.assert_array_equal(tree.find(targets), reference_find(reference, targets))


def test_duplicate_indices_last_write_wins():
    tree = SumTree(10, 2)
    tree.set(np.array([3, 5, 3, 3, 5]), np.array([1.0, 2.0, 7.0, 4.0, 0.0]))
    assert tree[np.array([3, 5])].tolist() == [4.0, 0.0]
    assert tree.total == 4.0


@pytest.mark.parametrize("branching", [2, 16, 32])
def test_random_floats_large_tree(branching):
    rng = np.random.default_rng(0)
    n = 100_003
    values = rng.random(n) * (rng.random(n) < 0.7)  # 30 % zeros
    tree = SumTree(n, branching)
    tree.fill(values)
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    cs = np.cumsum(values)
    targets = rng.random(5000) * cs[-1]
    found = tree.find(targets)
    assert (values[found] > 0).all()
    ref = reference_find(values, targets)
    # away from leaf boundaries the float round-off of both methods cannot matter
    safe = np.minimum(targets - (cs[ref] - values[ref]), cs[ref] - targets) > 1e-9 * cs[-1]
    np.testing.assert_array_equal(found[safe], ref[safe])
    idx = rng.integers(0, n, 4000)
    new = rng.random(4000)
    tree.set(idx, new)
    last = {}
    for i, v in zip(idx.tolist(), new.tolist(), strict=True):
        last[i] = v
    values[list(last)] = list(last.values())
    np.testing.assert_array_equal(tree.values, values)
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)


def test_zero_leaves_never_returned_even_at_or_past_total():
    tree = SumTree(70, 4)
    values = np.zeros(70)
    values[[5, 17, 40]] = [1.0, 2.0, 3.0]
    tree.fill(values)
    found = tree.find(np.array([0.0, 0.999, 1.0, 2.9999, 3.0, 5.9999, 6.0, 7.5, 1e9]))
    assert found.tolist() == [5, 5, 17, 17, 40, 40, 40, 40, 40]


def test_clear_and_fill_rebuild_every_level():
    rng = np.random.default_rng(1)
    tree = SumTree(1000, 8)
    values = rng.random(1000)
    tree.fill(values)
    assert tree.total == pytest.approx(values.sum())
    tree.clear()
    assert tree.total == 0.0 and not tree.values.any()


def test_invalid_construction_raises():
    with pytest.raises(ValueError, match="capacity >= 1 and branching >= 2"):
        SumTree(0)
    with pytest.raises(ValueError, match="branching=1"):
        SumTree(10, 1)


def test_min_rescan_spans_chunks_and_counts_ties_across_them():
    n = 200_003  # several rescan chunks, the last one partial
    rng = np.random.default_rng(2)
    values = rng.random(n) + 0.5
    values[[7, 70_000, 199_999]] = 0.25  # one tie in three chunks
    values[rng.random(n) < 0.2] = 0.0
    values[[7, 70_000, 199_999]] = 0.25
    tree = SumTree(n, track_min=True)
    tree.fill(values)
    assert tree.min == 0.25
    for key, rest in ((70_000, 0.25), (199_999, 0.25), (7, values[values > 0.25].min())):
        tree.set(np.array([key]), np.array([3.0]))  # the ties rise one by one
        assert tree.min == rest
    tree.set(np.array([123_456, 5]), np.array([0.125, 0.125]))
    tree.set(np.array([123_456]), np.array([0.0]))
    assert tree.min == 0.125
    tree.set(np.array([5]), np.array([-0.0]))  # a signed zero is no positive leaf
    assert tree.min == values[values > 0.25].min()
    tree.fill(np.zeros(n))
    assert tree.min == np.inf


def test_min_needs_track_min():
    with pytest.raises(ValueError, match="track_min=True"):
        _ = SumTree(10).min


@st.composite
def popcount_tree_ops(draw):
    """Trees of several levels under a root, at the branchings whose descent counts children
    with a popcount (8 and 16), with zeros, repeated indices and padded levels."""
    branching = draw(st.sampled_from([8, 16]))
    capacity = draw(st.integers(1, 5000))
    updates = draw(
        st.lists(
            st.lists(st.tuples(st.integers(0, capacity - 1), st.integers(0, 9)), max_size=60),
            min_size=1,
            max_size=4,
        )
    )
    return capacity, branching, updates


@settings(max_examples=120, deadline=None)
@given(popcount_tree_ops())
def test_popcount_descent_matches_brute_force(ops):
    capacity, branching, updates = ops
    tree = SumTree(capacity, branching, track_min=True)
    reference = np.zeros(capacity)
    for update in updates:
        idx = np.array([i for i, _ in update], dtype=np.int64)
        val = np.array([v for _, v in update], dtype=np.float64)
        tree.set(idx, val)
        for i, v in update:
            reference[i] = v
        assert tree.total == reference.sum()
        total = int(reference.sum())
        if not total:
            continue
        # integer values: exact sums, so every target (boundaries included) must match
        targets = np.concatenate([np.arange(total) + 0.5, np.arange(total, dtype=float)])
        found, values = tree.find_values(targets)
        np.testing.assert_array_equal(found, reference_find(reference, targets))
        np.testing.assert_array_equal(values, reference[found])
        # at or past the total: the last positive leaf; negative or NaN: as 0
        last = np.flatnonzero(reference)[-1]
        first = reference_find(reference, np.zeros(1))[0]
        odd = tree.find(np.array([total, total + 1e9, -1.0, np.nan]))
        assert odd.tolist() == [last, last, first, first]


@pytest.mark.parametrize("capacity", [1, 15, 16, 17, 255, 256, 257, 4097, 100_003])
@pytest.mark.parametrize("branching", [2, 5, 8, 16, 32])
def test_estimate_nbytes_is_what_the_tree_allocates(capacity, branching):
    tree = SumTree(capacity, branching, track_min=True)
    assert tree.nbytes == SumTree.estimate_nbytes(capacity, branching)
    assert tree.values.shape == (capacity,)


def test_find_of_no_targets_and_total_after_writes():
    tree = SumTree(1000, track_min=True)
    assert tree.find(np.zeros(0)).tolist() == [] and tree.total == 0.0
    tree.set(np.array([3, 999]), np.array([2.0, 5.0]))
    assert tree.total == 7.0  # the cached total follows every write
    tree.fill(np.ones(1000))
    assert tree.total == 1000.0
    tree.clear()
    assert tree.total == 0.0


@pytest.mark.parametrize(
    "capacity,branching", [(1_000_000, 16), (100_003, 16), (5000, 8), (3000, 2), (1, 16)]
)
def test_kept_prefix_sums_follow_every_write(capacity, branching):
    """find reads the exclusive prefix sums of the small levels from one product that every
    write makes stale: after fill, set and clear they are those of the levels now."""
    rng = np.random.default_rng(3)
    tree = SumTree(capacity, branching, track_min=True)

    def check() -> None:
        tree.find(np.zeros(2))  # a search brings the kept sums up to date
        for i, prefix in enumerate(tree._prefixes, tree._kept):
            blocks = tree._levels[i].reshape(-1, branching)
            if len(blocks) > 1:  # a row of a product rounds alike whatever the other rows
                np.testing.assert_array_equal(prefix, blocks @ tree._exclusive)
                swapped = blocks[[1, 0]] @ tree._exclusive
                np.testing.assert_array_equal(prefix[:2], swapped[::-1])
            else:  # a vector-matrix product may round differently
                np.testing.assert_allclose(prefix, blocks @ tree._exclusive, rtol=1e-14, atol=0)

    tree.fill(rng.random(capacity) ** 3)
    check()
    for k in (1, 7, 256, 4000):
        tree.set(rng.integers(0, capacity, k), rng.random(k) * (rng.random(k) < 0.8))
        check()
    tree.clear()
    check()


@pytest.mark.parametrize("capacity,branching", [(1_000_000, 16), (5000, 8), (3000, 5), (7, 2)])
def test_search_returns_the_found_leaves_nodes_for_set(capacity, branching):
    rng = np.random.default_rng(4)
    tree, plain = SumTree(capacity, branching, track_min=True), SumTree(capacity, branching)
    values = rng.random(capacity) * (rng.random(capacity) < 0.9)
    tree.fill(values)
    plain.fill(values)
    for _ in range(3):
        draws = rng.random(300)
        leaves, found, parents = tree.search(draws * tree.total, draws, tree.total)
        np.testing.assert_array_equal(found, values[leaves])
        assert parents is not None and len(parents) == len(tree._blocks)
        for i, nodes in enumerate(parents):
            np.testing.assert_array_equal(nodes, leaves // branching ** (i + 1))
        new = rng.random(300)
        tree.set(leaves, new, found, parents)  # the same levels as a set without them
        plain.set(leaves, new)
        values[leaves] = tree.values[leaves]
        for mine, theirs in zip(tree._levels, plain._levels, strict=True):
            np.testing.assert_array_equal(mine, theirs)
        assert tree.min == values[values > 0].min()
