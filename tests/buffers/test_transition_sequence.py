"""TransitionBuffer as the ``deque(maxlen=N)`` of transition tuples DQN tutorials start from:
``append``, ``random.sample``/``random.choices``, indexing, slicing, iteration, ``zip(*batch)``
(issue 36 item 1), and the errors for other classes' methods (issue 36 item 3)."""

from __future__ import annotations

import collections.abc
import random
from collections import deque, namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.buffers.transition_items import Transition as AddedTransition
from recollect.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    ShapeError,
    StateError,
    WrongClassError,
)

# The article's transition type, as DQN tutorials define it.
Transition = namedtuple("Transition", ("state", "action", "reward", "next_state", "done"))


def episode_steps(n: int, seed: int = 0) -> list[Transition]:
    """``n`` transitions of 4-float states over episodes of random length; rewards are
    multiples of 0.25 (exact in float32 and float64)."""
    rng = np.random.default_rng(seed)
    out = []
    state = rng.standard_normal(4).astype(np.float32)
    for _ in range(n):
        next_state = rng.standard_normal(4).astype(np.float32)
        done = bool(rng.random() < 0.1)
        action = int(rng.integers(2))
        reward = float(rng.integers(-4, 5)) / 4
        out.append(Transition(state, action, reward, next_state, done))
        state = rng.standard_normal(4).astype(np.float32) if done else next_state
    return out


def dqn_tutorial_batches(memory, steps, batch_size=32, seed=7):
    """The seed-004 article's replay code, verbatim apart from the memory it is given:
    append namedtuples, wait until ``len(memory) >= batch_size``, sample with
    ``random.sample``/``random.choices`` and unpack with ``zip(*batch)``."""
    rnd = random.Random(seed)
    batches = []
    for t, transition in enumerate(steps):
        memory.append(Transition(*transition))
        if len(memory) < batch_size:
            continue
        if t % 10 == 0:
            batch = rnd.sample(memory, batch_size)
            states, actions, rewards, next_states, dones = zip(*batch)  # noqa: B905 (the article's code)
            batches.append(
                (
                    np.array(states),
                    np.array(actions),
                    np.array(rewards, dtype=np.float32),
                    np.array(next_states),
                    np.array(dones, dtype=np.float32),
                )
            )
            assert all(isinstance(item, Transition) for item in batch)
        if t % 10 == 5:
            batch = Transition(*zip(*rnd.choices(memory, k=50)))  # noqa: B905
            batches.append(
                tuple(
                    np.array(x)
                    for x in (
                        batch.state,
                        batch.action,
                        batch.reward,
                        batch.next_state,
                        batch.done,
                    )
                )
            )
    return batches


def test_the_articles_dqn_replay_code_runs_unchanged_on_a_transition_buffer():
    """Same appends, same seeded ``random`` calls: the same batches from a deque and from a
    TransitionBuffer, also after both have dropped their oldest transitions."""
    steps = episode_steps(300)
    before = dqn_tutorial_batches(deque(maxlen=100), steps)
    after = dqn_tutorial_batches(rc.TransitionBuffer(capacity=100), steps)
    assert len(before) == len(after) == 53
    for want, got in zip(before, after, strict=True):
        for w, g in zip(want, got, strict=True):
            assert w.shape == g.shape
            np.testing.assert_array_equal(g, w)


def test_is_a_sequence_of_stored_transitions_oldest_first_like_a_deque():
    steps = episode_steps(30)
    memory, buf = deque(maxlen=20), rc.TransitionBuffer(capacity=20)
    assert isinstance(buf, collections.abc.Sequence)
    for transition in steps:
        memory.append(transition)
        buf.append(transition)
    assert len(buf) == len(memory) == 20
    assert_items_equal(list(buf), list(memory))
    assert_items_equal([buf[-1]], [steps[-1]])
    assert_items_equal([buf[0]], [steps[10]])
    assert_items_equal(buf[3:15:4], list(memory)[3:15:4])
    assert_items_equal(buf[::-3], list(memory)[::-3])
    assert buf[25:] == []
    assert_items_equal(list(reversed(buf)), list(reversed(memory)))


def assert_items_equal(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w)
        assert len(g) == len(w)
        for a, b in zip(g, w, strict=True):
            np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 12),
    n=st.integers(0, 40),
    index=st.integers(-50, 50),
    start=st.none() | st.integers(-15, 15),
    stop=st.none() | st.integers(-15, 15),
    step=st.sampled_from([None, 1, 2, -1, -3]),
)
def test_indexing_and_slicing_match_a_deque(capacity, n, index, start, stop, step):
    """Reference twin: a ``deque(maxlen=capacity)`` given the same appends."""
    steps = episode_steps(n, seed=n)
    memory, buf = deque(maxlen=capacity), rc.TransitionBuffer(capacity=capacity)
    for transition in steps:
        memory.append(transition)
        buf.append(transition)
    assert len(buf) == len(memory)
    if -len(memory) <= index < len(memory):
        assert_items_equal([buf[index]], [memory[index]])
    else:
        with pytest.raises(IndexError, match=f"index {index} out of range"):
            buf[index]
    window = slice(start, stop, step)
    assert_items_equal(buf[window], list(memory)[window])
    assert_items_equal(list(buf), list(memory))


def test_vector_env_transitions_come_in_add_order_then_env_order():
    buf = rc.TransitionBuffer(capacity=6, num_envs=2)
    for t in range(5):
        obs = np.array([[t, 0], [t, 1]], np.float32)
        buf.append((obs, np.array([t, -t]), np.array([1.0, 2.0]), obs + 10, np.array([0, 1]) > 0))
    assert len(buf) == 6
    got = [(float(x[0][0]), float(x[0][1])) for x in buf]
    assert got == [(2, 0), (2, 1), (3, 0), (3, 1), (4, 0), (4, 1)]
    np.testing.assert_array_equal(buf[-1][3], [14, 11])
    assert buf[-1][4] and not buf[-2][4]


def test_appended_form_is_read_back_plain_tuple_four_and_six_fields():
    s, s2 = np.zeros(2, np.float32), np.ones(2, np.float32)
    plain = rc.TransitionBuffer(capacity=4)
    plain.append((s, 1, 0.5, s2, True))
    item = plain[0]
    assert type(item) is tuple and len(item) == 5 and item[4]

    Pair = namedtuple("Pair", "state action reward next_state")  # no done field
    four = rc.TransitionBuffer(capacity=4)
    four.append(Pair(s, 1, 0.5, s2))
    assert type(four[0]) is Pair
    assert not four.sample(1).terminated[0] and not four.sample(1).truncated[0]

    six = rc.TransitionBuffer(capacity=4)
    six.append((s, 1, 0.5, s2, False, True))
    assert six[0][4:] == (False, True) and six.sample(1).truncated[0]

    added = rc.TransitionBuffer(capacity=4)
    added.add(s, 1, 0.5, s2, False, True)
    item = added[0]
    assert type(item) is AddedTransition and item.truncated and not item.terminated
    np.testing.assert_array_equal(item.next_observation, s2)


def test_nested_observations_read_back_as_nests():
    buf = rc.TransitionBuffer(capacity=4)
    obs = {"pos": np.arange(3, dtype=np.float32), "img": np.full((2, 2), 7, np.uint8)}
    nxt = {"pos": obs["pos"] + 1, "img": obs["img"] + 1}
    buf.append((obs, 2, 1.0, nxt, False))
    s, a, r, s2, done = buf[0]
    np.testing.assert_array_equal(s2["img"], nxt["img"])
    assert s["img"].dtype == np.uint8 and a == 2 and r == 1.0 and not done


def test_one_item_reads_one_slot_per_leaf_never_the_buffer():
    """``random.sample`` calls ``__getitem__`` k times: each reads the transition's own slots
    (observation and next observation: 2 rows; other leaves: 1 row)."""
    buf = rc.TransitionBuffer(capacity=1000)
    for transition in episode_steps(1000):
        buf.append(transition)
    storage = buf.replay_buffer.storage
    sizes = []
    gather = storage.gather

    def counting(rows, *args, **kwargs):
        sizes.append(len(rows))
        return gather(rows, *args, **kwargs)

    storage.gather = counting
    batch = random.Random(0).sample(buf, 32)
    del storage.gather
    # a plain ring: each item is read from its slots directly, with no gather at all
    assert len(batch) == 32 and max(sizes, default=0) <= 2


def test_iteration_raises_when_unread_transitions_are_cleared():
    buf = rc.TransitionBuffer(capacity=1000)
    for transition in episode_steps(600):
        buf.append(transition)
    items = iter(buf)
    next(items)
    buf.clear()
    with pytest.raises(StateError, match="overwritten or cleared while being iterated"):
        list(items)


def test_iteration_leaves_out_transitions_added_meanwhile():
    steps = episode_steps(10)
    buf = rc.TransitionBuffer(capacity=100)
    for transition in steps[:5]:
        buf.append(transition)
    seen = []
    for i, item in enumerate(buf):
        seen.append(item)
        buf.append(steps[5 + i])
    assert_items_equal(seen, steps[:5])
    assert len(buf) == 10


def test_append_errors_name_what_was_expected_and_leave_the_buffer_unchanged():
    s = np.zeros(2, np.float32)
    buf = rc.TransitionBuffer(capacity=8)
    with pytest.raises(InvalidArgumentTypeError, match=r"takes a tuple or namedtuple.*got list"):
        buf.append([s, 1, 1.0, s, False])
    with pytest.raises(InvalidArgumentError, match="4, 5 or 6 fields; got 3 fields"):
        buf.append((s, 1, 1.0))
    Torch = namedtuple("Torch", ("state", "action", "next_state", "reward"))
    with pytest.raises(InvalidArgumentError, match="'next_state' at position 2"):
        buf.append(Torch(s, 1, s, 1.0))
    assert len(buf) == 0
    buf.append(Transition(s, 1, 1.0, s, False))
    with pytest.raises(InvalidArgumentError, match="holds Transition namedtuples of 5 fields"):
        buf.append((s, 1, 1.0, s, False))
    with pytest.raises(ShapeError):
        buf.append(Transition(np.zeros(3, np.float32), 1, 1.0, s, False))
    assert len(buf) == 1 and type(buf[0]) is Transition


def test_bad_index_types_raise():
    buf = rc.TransitionBuffer(capacity=4)
    with pytest.raises(IndexError, match="index 0 out of range: it is empty"):
        buf[0]
    assert buf[:] == [] and list(buf) == []
    with pytest.raises(InvalidArgumentTypeError, match="indices must be ints or slices; got str"):
        buf["observation"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("add_batch", "TransitionBuffer has no add_batch.*use add\\(observation"),
        ("get_next", "TransitionBuffer has no get_next.*use sample\\(batch_size\\)"),
    ],
)
def test_other_classes_methods_name_the_right_call(name, message):
    buf = rc.TransitionBuffer(capacity=4)
    with pytest.raises(WrongClassError, match=message) as caught:
        getattr(buf, name)(1)
    assert isinstance(caught.value, AttributeError)
    assert not hasattr(buf, name)
    with pytest.raises(AttributeError, match="no attribute 'add_batchh'"):
        buf.add_batchh  # noqa: B018 - an unknown name stays a plain AttributeError


@pytest.mark.parametrize("appended", ["namedtuple", "tuple", "add"])
def test_a_checkpoint_keeps_the_appended_form(tmp_path, appended):
    steps = episode_steps(12)
    buf = rc.TransitionBuffer(capacity=8)
    for transition in steps[:10]:
        if appended == "namedtuple":
            buf.append(transition)
        elif appended == "tuple":
            buf.append(tuple(transition))
        else:
            buf.add(*transition)
    loaded = rc.TransitionBuffer.load(buf.save(tmp_path / "ckpt"))
    item = loaded[-1]
    want_type = {"namedtuple": "Transition", "tuple": "tuple", "add": "Transition"}[appended]
    assert type(item).__name__ == want_type and len(item) == len(buf[-1])
    assert_items_equal([tuple(x) for x in loaded], [tuple(x) for x in buf])
    if appended == "namedtuple":
        assert item._fields == Transition._fields
        loaded.append(steps[10])  # the user's own class is taken back
        assert type(loaded[-1]) is Transition
    elif appended == "tuple":
        with pytest.raises(InvalidArgumentError, match="holds tuples of 5 fields"):
            loaded.append(steps[10])


@pytest.mark.parametrize("num_envs", [1, 2])
@settings(max_examples=20, deadline=None)
@given(steps=st.integers(1, 40), capacity_steps=st.integers(1, 12), seed=st.integers(0, 999))
def test_every_item_equals_what_a_deque_holds_and_is_read_without_a_gather(
    num_envs, steps, capacity_steps, seed
):
    """``buf[i]`` (stored next observations, kept finals at chain breaks, the pending newest)
    is the deque's ``i``-th item, read straight from the ring (no ``storage.gather``)."""
    rng = np.random.default_rng(seed)
    buf = rc.TransitionBuffer(capacity_steps * num_envs, num_envs)
    reference: deque = deque(maxlen=capacity_steps * num_envs)
    obs = rng.standard_normal((num_envs, 3)).astype(np.float32)
    for _ in range(steps):
        nxt = rng.standard_normal((num_envs, 3)).astype(np.float32)
        done = rng.random(num_envs) < 0.3
        act, rew = rng.integers(0, 4, num_envs), rng.standard_normal(num_envs).astype(np.float32)
        if num_envs == 1:
            buf.add(obs[0], act[0], rew[0], nxt[0], done[0])
        else:
            buf.add(obs, act, rew, nxt, done)
        for e in range(num_envs):
            reference.append((obs[e], act[e], rew[e], nxt[e], done[e]))
        obs = np.where(done[:, None], rng.standard_normal((num_envs, 3)), nxt).astype(np.float32)
    storage = buf.replay_buffer.storage
    storage.gather = None  # any gather would raise TypeError
    try:
        items = [buf[i] for i in range(-len(buf), len(buf))]
    finally:
        del storage.gather
    assert len(buf) == len(reference)
    for got, want in zip(items, list(reference) * 2, strict=True):
        assert got[0].tobytes() == want[0].tobytes()  # (s, a, r, s2, terminated, truncated)
        assert got[3].tobytes() == want[3].tobytes()
        assert (got[1], got[2], got[4], got[5]) == (want[1], want[2], want[4], False)
