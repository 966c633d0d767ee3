"""Fifo / Lifo samplers: deterministic oldest-first / newest-first valid windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from reference import window_ids

SPEC = {
    "observation": rc.ArraySpec((2,), np.float32),
    "action": rc.ArraySpec((), np.int32),
    "frame": rc.ArraySpec((3,), np.uint8),
    "reward": rc.ArraySpec((), np.float16),
    "is_last": rc.ArraySpec((), bool),
}


def fill(buf, is_last_rows):
    for t, is_last in enumerate(is_last_rows):
        n = buf.num_envs
        buf.add_batch(
            {
                "observation": np.full((n, 2), t, np.float32),
                "action": np.arange(n, dtype=np.int32),
                "frame": np.full((n, 3), t % 256, np.uint8),
                "reward": np.full(n, t, np.float16),
                "is_last": np.asarray(is_last, bool),
            }
        )


@st.composite
def cases(draw):
    num_envs = draw(st.integers(1, 3))
    max_length = draw(st.integers(2, 10))
    steps = draw(st.integers(1, 30))
    is_last = draw(
        st.lists(
            st.lists(st.booleans(), min_size=num_envs, max_size=num_envs),
            min_size=steps,
            max_size=steps,
        )
    )
    num_steps = draw(st.integers(1, max_length))
    batch = draw(st.integers(1, 25))
    return num_envs, max_length, is_last, num_steps, batch


@settings(max_examples=120, deadline=None)
@given(cases(), st.booleans())
def test_fifo_and_lifo_match_brute_force_order(case, within_episode):
    num_envs, max_length, is_last, num_steps, batch = case
    for sampler, reverse in ((rc.Fifo(), False), (rc.Lifo(), True)):
        buf = rc.ReplayBuffer(SPEC, num_envs * max_length, num_envs, sampler=sampler, rng=0)
        fill(buf, is_last)
        is_last_rows = buf.gather_all()["is_last"]
        order = window_ids(is_last_rows, int(buf.table.index.lo[0]), num_steps, within_episode)
        if len(order) == 0:
            with pytest.raises(rc.errors.NotEnoughDataError):
                buf.sample(batch, num_steps, within_episode=within_episode)
            continue
        if reverse:
            order = order[::-1]
        expected = order[np.arange(batch) % len(order)]
        # the sampler's order: sample(k) is the first k windows (cyclic past N)
        w = buf.reader.sampler.sample(batch, num_steps, within_episode, buf.reader.rng)
        np.testing.assert_array_equal(rc.ids.encode(w.rows, w.times), expected)
        # a buffer's batch is one selection per item, as Reverb: the first window b times
        s = buf.sample(batch, num_steps, within_episode=within_episode)
        np.testing.assert_array_equal(s.ids, np.full(batch, order[0]))
        np.testing.assert_array_equal(s.probabilities, np.ones(batch))
        times = rc.ids.decode(s.ids)[2]
        np.testing.assert_array_equal(s.data["observation"][:, 0, 0], times.astype(np.float32))


def ids_of(pairs: list[tuple[int, int]]) -> list[int]:
    """Ids of ``(time, row)`` steps."""
    return [int(rc.ids.encode(row, time)) for time, row in pairs]


def test_fifo_queue_example_and_no_rng_use():
    buf = rc.ReplayBuffer(SPEC, 8, 2, sampler=rc.Fifo(), rng=0)
    fill(buf, [[False, False]] * 3 + [[True, False]] + [[False, False]] * 2)
    state = buf.reader.rng.bit_generator.state
    # stored times 0..5 (max_length 4 -> times 2..5); row 0 ends an episode at t=3
    oldest = ids_of([(2, 0), (2, 1), (3, 1), (4, 0), (4, 1)])
    assert buf.sample(5, 2).ids.tolist() == oldest[:1] * 5  # Reverb: the top item b times
    assert buf.sample(5, 2).ids.tolist() == oldest[:1] * 5  # sampling removes nothing
    assert buf.reader.rng.bit_generator.state == state
    queue = rc.ReplayBuffer(SPEC, 8, 2, sampler=rc.Fifo(), rng=0, max_times_sampled=1)
    fill(queue, [[False, False]] * 3 + [[True, False]] + [[False, False]] * 2)
    assert queue.sample(5, 2).ids.tolist() == oldest  # each window once, in order
    lifo = rc.ReplayBuffer(SPEC, 8, 2, sampler=rc.Lifo(), rng=0, max_times_sampled=1)
    fill(lifo, [[False, False]] * 3 + [[True, False]] + [[False, False]] * 2)
    assert lifo.sample(3, 2).ids.tolist() == ids_of([(4, 1), (4, 0), (3, 1)])
    assert lifo.sample(1).ids.tolist() == ids_of([(5, 1)])


def test_fifo_rejects_options():
    buf = rc.ReplayBuffer(SPEC, 8, 2, sampler=rc.Fifo(), rng=0)
    fill(buf, [[False, False]] * 3)
    with pytest.raises(TypeError, match=r"Fifo sampling takes no options; got \['beta'\]"):
        buf.sample(2, beta=1.0)
