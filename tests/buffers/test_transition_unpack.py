"""A TransitionBuffer sample unpacks like the deque/``random.choices`` recipe's batch."""

from __future__ import annotations

import random
from collections import deque

import numpy as np

import recollect


def test_sample_unpacks_in_the_deque_recipes_order():
    buf = recollect.TransitionBuffer(capacity=100, rng=0)
    for t in range(10):
        buf.add(np.full(3, t, np.float32), t % 2, float(t), np.full(3, t + 1, np.float32), t == 9)
    obs, action, reward, next_obs, done = buf.sample(64)
    s = buf.sample(1)
    assert [type(x) for x in s] == [type(x) for x in (s.observation, s.action, s.reward)] + [
        type(s.next_observation),
        type(s.terminated),
    ]
    assert obs.shape == (64, 3) and next_obs.shape == (64, 3)
    np.testing.assert_array_equal(next_obs[:, 0], obs[:, 0] + 1)
    np.testing.assert_array_equal(reward, obs[:, 0])
    np.testing.assert_array_equal(action, obs[:, 0].astype(int) % 2)
    np.testing.assert_array_equal(done, obs[:, 0] == 9)


def test_migration_from_a_deque_buffer_keeps_the_training_code():
    """The five-line migration: only the buffer lines change, the unpacking stays."""
    rng = np.random.default_rng(0)
    steps = [
        (rng.standard_normal(2).astype(np.float32), int(rng.integers(2)), float(rng.random()))
        for _ in range(30)
    ]

    def transitions():
        for t, (s, a, r) in enumerate(steps[:-1]):
            yield s, a, r, steps[t + 1][0], t == len(steps) - 2

    memory = deque(maxlen=1000)  # before
    for tr in transitions():
        memory.append(tr)
    s, a, r, s2, d = map(np.array, zip(*random.Random(0).choices(memory, k=32), strict=True))
    buf = recollect.TransitionBuffer(capacity=1000, rng=0)  # after
    for tr in transitions():
        buf.add(*tr)
    s_, a_, r_, s2_, d_ = buf.sample(32)
    for before, after in ((s, s_), (a, a_), (r, r_), (s2, s2_), (d, d_)):
        assert before.shape == after.shape
    stored = {tuple(x) for x in s}
    assert {tuple(x) for x in s_} <= {tuple(tr[0]) for tr in transitions()}
    assert stored
