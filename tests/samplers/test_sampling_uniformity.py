"""Chi-square tests: sampling is exactly uniform over the valid windows (fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

import recollect as rc
from recollect.specs import FlatSpec
from reference import ReferenceBuffer, by_id

SPEC = {
    "observation": rc.ArraySpec((2,), np.float16),
    "action": rc.ArraySpec((), np.int32),
    "is_last": rc.ArraySpec((), np.bool_),
}
P_MIN = 1e-3  # the seed is fixed, so this is deterministic; a biased sampler gives p ~ 0


def _fill(buf: rc.ReplayBuffer, ref: ReferenceBuffer, episode_lengths: list[int], steps: int):
    """Adds ``steps`` batches; row ``r`` ends an episode every ``episode_lengths[r]`` steps."""
    flat = FlatSpec(SPEC)
    lengths = np.array(episode_lengths)
    for t in range(steps):
        batch = {
            "observation": np.full((len(lengths), 2), t % 1000, np.float16),
            "action": np.arange(len(lengths), dtype=np.int32) + 10 * t,
            "is_last": (t + 1) % lengths == 0,
        }
        buf.add_batch(batch)
        ref.add_batch(flat.treedef.flatten_up_to(batch))


def _assert_uniform(buf: rc.ReplayBuffer, valid: list, num_steps: int, within, draws: int):
    """Draws ``draws`` windows and runs a chi-square test over all valid windows."""
    position = {w: k for k, w in enumerate(valid)}
    counts = np.zeros(len(valid), np.int64)
    for _ in range(draws // 1000):
        s = buf.sample(1000, num_steps, within_episode=within)
        np.testing.assert_array_equal(s.probabilities, 1.0 / len(valid))
        hits = [position[w] for w in by_id(s.ids, buf.num_envs)]  # KeyError: invalid window
        counts += np.bincount(hits, minlength=len(valid))
    result = chisquare(counts)
    assert result.pvalue > P_MIN, (result, counts.min(), counts.max())
    return counts


def test_uniform_over_rows_with_very_different_episode_lengths():
    buf = rc.ReplayBuffer(SPEC, capacity=2 * 200, num_envs=2, rng=1234)
    ref = ReferenceBuffer(2, 200, FlatSpec(SPEC).index("is_last"))
    _fill(buf, ref, [2, 50], 150)
    valid = ref.windows(2, True)
    rows = np.array([r for r, _ in valid])
    assert (rows == 0).sum() == 75 and (rows == 1).sum() == 3 * 49
    counts = _assert_uniform(buf, valid, 2, None, 120_000)
    # Each row is drawn in proportion to its number of valid windows, not 50/50.
    share = counts[rows == 0].sum() / counts.sum()
    assert share == pytest.approx(75 / len(valid), abs=0.01)


def test_uniform_after_wraparound_with_partial_episodes():
    buf = rc.ReplayBuffer(SPEC, capacity=3 * 40, num_envs=3, rng=7)
    ref = ReferenceBuffer(3, 40, FlatSpec(SPEC).index("is_last"))
    _fill(buf, ref, [3, 7, 100], 57)  # wraps each 40-step ring; row 2 never ends an episode
    assert buf.num_frames() == 120
    valid = ref.windows(3, True)
    _assert_uniform(buf, valid, 3, None, 60_000)


def test_uniform_after_clear_and_across_episodes_when_overridden():
    buf = rc.ReplayBuffer(SPEC, capacity=2 * 30, num_envs=2, rng=99)
    ref = ReferenceBuffer(2, 30, FlatSpec(SPEC).index("is_last"))
    _fill(buf, ref, [4, 9], 45)
    buf.clear()
    ref.clear()
    _fill(buf, ref, [4, 9], 22)
    valid = ref.windows(5, False)
    assert len(valid) == 2 * (22 - 5 + 1)
    _assert_uniform(buf, valid, 5, False, 40_000)


def test_uniform_single_steps_without_episode_leaf():
    spec = {"x": rc.ArraySpec((3,), np.uint8)}
    buf = rc.ReplayBuffer(spec, capacity=4 * 25, num_envs=4, rng=3)
    for t in range(61):
        buf.add_batch({"x": np.full((4, 3), t, np.uint8)})
    ids = np.concatenate([buf.sample(1000).ids for _ in range(50)])
    stored = buf.reader.item_ids().ravel()
    assert np.isin(ids, stored).all()
    counts = np.array([(ids == i).sum() for i in stored])
    assert chisquare(counts).pvalue > P_MIN
