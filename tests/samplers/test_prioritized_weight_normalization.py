"""Buffer-wide importance weights (cpprb, baselines) and the per-batch rule (issue 26, item 5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.samplers import SumTree
from recollect.service import Server

SPEC = {"x": rc.ArraySpec((), np.int64)}


def hundred(mode: str, epsilon: float = 0.0) -> rc.ReplayBuffer:
    sampler = rc.Prioritized(1.0, epsilon, weight_normalization=mode)
    buf = rc.ReplayBuffer(SPEC, 100, sampler=sampler, sequence_length=1, rng=0)
    for i in range(100):
        buf.add({"x": i})
    buf.update_priorities(buf.reader.item_ids().reshape(-1), np.r_[0.01, np.ones(99)])
    return buf


def batch_without_the_low_item(buf: rc.ReplayBuffer) -> rc.Sample:
    for _ in range(100):
        s = buf.sample(8, importance_sampling_exponent=0.5)
        if 0 not in s.data["x"]:
            return s
    raise AssertionError("the low item was in every batch")


def test_cpprb_example_buffer_normalisation_is_the_default():
    # priorities [0.01] + [1] * 99, alpha 1, beta 0.5: cpprb gives 0.1 = (1 / 0.01)^-0.5
    s = batch_without_the_low_item(hundred("buffer"))
    np.testing.assert_allclose(s.weights, 0.1, rtol=1e-12)
    assert rc.Prioritized().weight_normalization == "buffer"


def test_batch_normalisation_divides_by_the_batch_max():
    s = batch_without_the_low_item(hundred("batch"))
    np.testing.assert_allclose(s.weights, 1.0)  # Dopamine's rule


def test_weights_follow_the_formula_with_the_smallest_stored_priority():
    rng = np.random.default_rng(0)
    buf = hundred("buffer", 1e-3)
    p = rng.uniform(0.0, 5.0, 100)
    buf.update_priorities(buf.reader.item_ids().reshape(-1), p)
    s = buf.sample(64, importance_sampling_exponent=0.7)
    values = (p + 1e-3) ** 1.0
    n, p_min = 100, values.min() / values.sum()
    expected = (n * s.probabilities) ** -0.7 / (n * p_min) ** -0.7
    np.testing.assert_allclose(s.weights, expected, rtol=1e-10)
    assert (s.weights <= 1.0 + 1e-12).all()


def test_weights_follow_the_minimum_when_it_rises_or_is_overwritten():
    buf = hundred("buffer")  # item 0: priority 0.01, items 1-99: 1 (alpha 1, epsilon 0)
    ids = buf.reader.item_ids().reshape(-1)
    buf.update_priorities(ids[1:2], [0.02])
    buf.update_priorities(ids[:1], [0.5])  # the minimum rises: 0.02 is the smallest now
    assert buf.reader.sampler.min_sampling_value() == 0.02
    s = buf.sample(64, importance_sampling_exponent=0.5)
    values = s.probabilities * (0.5 + 0.02 + 98)
    np.testing.assert_allclose(s.weights, (values / 0.02) ** -0.5, rtol=1e-10)
    buf.add({"x": 100})
    buf.add({"x": 101})  # the ring overwrites items 0 and 1: every priority is 1 again
    assert buf.reader.sampler.min_sampling_value() == 1.0
    np.testing.assert_allclose(buf.sample(64, importance_sampling_exponent=0.5).weights, 1.0)


def test_unknown_rule_is_refused():
    with pytest.raises(rc.errors.InvalidArgumentError, match=r'"buffer" .* or "batch" .*got'):
        rc.Prioritized(weight_normalization="max")


def test_rule_and_minimum_survive_a_checkpoint(tmp_path):
    buf = hundred("buffer")
    buf.save(tmp_path / "per")
    restored = rc.ReplayBuffer.load(tmp_path / "per")
    assert restored.reader.sampler.weight_normalization == "buffer"
    assert restored.reader.sampler.min_sampling_value() == pytest.approx(0.01)
    s = batch_without_the_low_item(restored)
    np.testing.assert_allclose(s.weights, 0.1, rtol=1e-12)
    assert rc.ReplayBuffer.load(tmp_path / "per").reader.sampler.get_config()[
        "weight_normalization"
    ]


def test_buffer_weights_over_four_shards_use_the_global_smallest_priority():
    sampler = rc.Prioritized(1.0, 0.0, importance_sampling_exponent=0.5)
    buf = rc.ReplayBuffer(SPEC, 8 * 8, 8, sampler=sampler, sequence_length=1)
    server = Server({"t": buf}, num_shards=4)
    client = server.client(rng=0)
    for shard in server.shards["t"]:
        for i in range(8):
            shard.buffer.add_batch({"x": np.full(2, i)})
    ids = np.concatenate([s.buffer.reader.item_ids().reshape(-1) for s in server.shards["t"]])
    p = np.ones(len(ids))
    p[0] = 0.01  # on shard 0 only
    client.update_priorities("t", ids, p, wait=True)
    for batches in (1, 3):
        for s in client.sample_batches("t", 16, batches):
            low = s.ids == ids[0]
            np.testing.assert_allclose(s.weights[~low], 0.1, rtol=1e-9)
            np.testing.assert_allclose(s.weights[low], 1.0, rtol=1e-9)
    server.close()


def smallest_positive(leaves: np.ndarray) -> float:
    """The slow twin of ``SumTree.min``."""
    positive = leaves[leaves > 0]
    return float(positive.min()) if len(positive) else np.inf


# the minimum's own leaves are the ones a lazy minimum can get wrong: raise, zero or
# re-set them (ties included), and read the minimum only now and then, so that several
# changes pile up between two reads
MIN_VALUES = np.array([0.0, 1e-9, 0.5, 1.0, 2.0])
MIN_OPS = ["set", "set", "set", "raise_min", "zero_min", "raise_one_min", "keep_min", "fill"]


def min_tree_writes(op: str, leaves: np.ndarray, rng: np.random.Generator):
    """``(keys, values)`` of one write (``op`` of MIN_OPS but fill); a key may repeat."""
    low = np.flatnonzero(leaves == smallest_positive(leaves))
    if op == "set" or not len(low):  # random keys and values, repeats and ties likely
        keys = rng.integers(0, len(leaves), rng.integers(1, 50))
        return keys, rng.choice(MIN_VALUES, len(keys))
    keys = low[:1] if op == "raise_one_min" else low
    first, then = {  # each key written twice: the second write wins
        "raise_min": (0.0, 3.0),
        "raise_one_min": (0.0, 3.0),
        "zero_min": (5.0, 0.0),
        "keep_min": (7.0, leaves[low[0]]),
    }[op]
    return np.r_[keys, keys], np.r_[np.full(len(keys), first), np.full(len(keys), then)]


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 1200),
    branching=st.sampled_from([2, 3, 16]),
    ops=st.lists(st.tuples(st.sampled_from(MIN_OPS), st.booleans()), min_size=1, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_sum_tree_min_is_the_smallest_positive_leaf(capacity, branching, ops, seed):
    rng = np.random.default_rng(seed)
    tree = SumTree(capacity, branching, track_min=True)
    leaves = np.zeros(capacity)
    for op, read in ops:
        if op == "fill":
            leaves = rng.choice(MIN_VALUES, capacity)
            tree.fill(leaves.copy())
        else:
            keys, values = min_tree_writes(op, leaves, rng)
            tree.set(keys, values)
            for k, v in zip(keys, values, strict=True):  # the last write of a key wins
                leaves[k] = v
        if read:
            assert tree.min == smallest_positive(leaves)
    assert tree.min == smallest_positive(leaves)
    tree.clear()
    assert tree.min == np.inf


@pytest.mark.parametrize("limiter", [None, rc.MinSize(1)])
def test_buffer_weights_from_one_shard_in_several_batches(limiter):
    buf = hundred("buffer")
    buf = rc.ReplayBuffer.from_config(buf.config(), rate_limiter=limiter)
    server = Server({"t": buf}, num_shards=1)
    client = server.client(rng=0)
    shard = server.shards["t"][0].buffer
    for i in range(100):
        shard.add({"x": i})
    ids = shard.reader.item_ids().reshape(-1)
    client.update_priorities("t", ids, np.r_[0.01, np.ones(99)], wait=True)
    for s in client.sample_batches("t", 8, 3, importance_sampling_exponent=0.5):
        low = s.ids == ids[0]
        np.testing.assert_allclose(s.weights[~low], 0.1, rtol=1e-9)
    server.close()
