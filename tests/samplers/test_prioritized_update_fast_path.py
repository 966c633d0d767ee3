"""update_priorities of exactly the last draw's ids (no decoding, no validity checks)
against the checked path: the same tree, the same skips, the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError
from recollect.ids import SHARD_SHIFT

SPEC = {
    "observation": rc.ArraySpec((3,), np.float32),
    "reward": rc.ArraySpec((), np.float16),
    "done": rc.ArraySpec((), np.bool_),
}


def make(
    seed: int = 0, capacity: int = 48, num_envs: int = 4, seq: int = 2, alpha: float = 0.6
) -> rc.ReplayBuffer:
    sampler = rc.Prioritized(alpha)
    buf = rc.ReplayBuffer(SPEC, capacity, num_envs, sampler=sampler, sequence_length=seq, rng=seed)
    for t in range(capacity // num_envs + 3):
        buf.add_batch(step(t, num_envs))
    return buf


def step(t: int, num_envs: int = 4) -> dict:
    return {
        "observation": np.full((num_envs, 3), t, np.float32),
        "reward": np.full(num_envs, t, np.float16),
        "done": np.zeros(num_envs, bool),
    }


def checked(buf: rc.ReplayBuffer) -> rc.ReplayBuffer:
    """``buf`` made to forget its draws, so that every update takes the checked path."""
    sampler = buf.reader.sampler
    sample = sampler.sample

    def forgetting(*args, **kwargs):
        draw = sample(*args, **kwargs)
        sampler._drawn = None
        return draw

    sampler.sample = forgetting
    return buf


@pytest.mark.parametrize("between", ["nothing", "add", "delete", "other ids", "update"])
def test_fast_path_equals_the_checked_path(between):
    fast, slow = make(), checked(make())
    rng = np.random.default_rng(1)
    for t in range(40):
        priorities = rng.random(32) * 3
        skips = []
        for buf in (fast, slow):
            s = buf.sample(32)  # 32 of ~44 windows: repeated ids in most batches
            ids = s.ids
            if between == "add" and t % 3 == 0:
                buf.add_batch(step(100 + t))
            elif between == "delete" and t % 3 == 0:
                buf.delete(ids[:4])
            elif between == "other ids":
                ids = ids[::-1].copy()
            elif between == "update":
                buf.update_priorities(ids[:5], priorities[:5] + 1)
            skips.append(buf.update_priorities(ids, priorities))
        assert skips[0] == skips[1]
        np.testing.assert_array_equal(
            fast.reader.sampler._tree.values, slow.reader.sampler._tree.values
        )
        assert fast.reader.sampler.max_priority == slow.reader.sampler.max_priority
    if between in ("add", "delete"):
        assert fast.info().size == slow.info().size


def test_ids_of_the_last_draw_after_a_write_are_checked_and_stale_ones_skipped():
    buf = make(capacity=16, num_envs=4)  # 4 slots per row: one add overwrites a window a row
    s = buf.sample(64)
    buf.add_batch(step(99))
    gone = np.isin(s.ids, buf.reader.item_ids().reshape(-1), invert=True)
    assert gone.any()
    assert buf.update_priorities(s.ids, np.ones(64)) == int(gone.sum())


def test_an_id_changed_in_place_is_not_taken_for_the_drawn_one():
    fast, slow = make(), checked(make())
    for buf in (fast, slow):
        s = buf.sample(8)
        ids = s.ids
        ids[0] = ids[1] if ids[1] != ids[0] else ids[2]  # the caller edits the returned array
        buf.update_priorities(ids, np.arange(8.0) + 2)
    np.testing.assert_array_equal(
        fast.reader.sampler._tree.values, slow.reader.sampler._tree.values
    )


def test_shard_ids_of_the_last_draw():
    fast, slow = make(), checked(make())
    for buf in (fast, slow):
        s = buf.sample(16)
        shard_ids = s.ids | (3 << SHARD_SHIFT)
        assert buf.reader.sampler.update_priorities(shard_ids, np.full(16, 2.0), shard=3) == 0
        assert buf.reader.sampler.update_priorities(s.ids, np.full(16, 5.0), shard=3) == 16
    np.testing.assert_array_equal(
        fast.reader.sampler._tree.values, slow.reader.sampler._tree.values
    )


@pytest.mark.parametrize(
    ("priorities", "match"),
    [
        (np.array([np.nan] + [1.0] * 7), "finite and >= 0"),
        (np.array([-1.0] + [1.0] * 7), "finite and >= 0"),
        (np.array([1e308] * 8), "overflows"),
        (np.ones(7), "same shape"),
    ],
)
def test_bad_priorities_for_the_drawn_ids_raise_the_same_errors(priorities, match):
    buf = make(alpha=1.0)  # alpha 1: 8 priorities of 1e308 overflow the sum
    s = buf.sample(8)
    before = buf.reader.sampler._tree.values.copy()
    with pytest.raises(InvalidArgumentError, match=match):
        buf.update_priorities(s.ids, priorities)
    np.testing.assert_array_equal(buf.reader.sampler._tree.values, before)


def test_a_restored_state_forgets_the_draw():
    buf = make()
    state = buf.reader.sampler.state_dict()
    s = buf.sample(8)
    buf.reader.sampler.load_state_dict(state)
    assert buf.reader.sampler._drawn is None
    buf.update_priorities(s.ids, np.ones(8))  # still valid: the checked path updates them
    buf.clear()
    assert buf.reader.sampler._drawn is None
