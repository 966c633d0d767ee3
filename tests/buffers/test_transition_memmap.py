"""TransitionBuffer(storage="memmap"): frame stacks, compressed frames and the step leaves in
files, checked against the reference model (tests/reference.py) and the same buffer in RAM."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import InvalidArgumentError
from reference import ReferenceTransitions

STACK = 4


class Frames:
    """Atari-like stacks ``[4, 6, 6]`` uint8 (stack axis 0, reset padding): an episode
    start repeats its first frame; a chained step drops the oldest frame."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def frame(self) -> np.ndarray:
        # low entropy (compressible) but distinct
        return np.repeat(self.rng.integers(0, 8, (1, 6, 1), np.uint8), 6, axis=2)

    def start(self) -> np.ndarray:
        return np.repeat(self.frame(), STACK, axis=0)

    def advance(self, stack: np.ndarray) -> np.ndarray:
        return np.concatenate([stack[1:], self.frame()])


def make(tmp_path, num_envs, max_length, seed, prioritized=False, storage="memmap", name="buf"):
    kw = {"storage": "memmap", "directory": tmp_path / name} if storage == "memmap" else {}
    return rc.TransitionBuffer(
        num_envs * max_length, num_envs, rng=seed, prioritized=prioritized,
        frame_stack=rc.FrameStack(STACK, axis=0, padding="reset"),
        compression={"observation": "zstd"}, **kw,
    )  # fmt: skip


def check_against(buf, ref: ReferenceTransitions, batch_size: int = 48) -> None:
    """Every sampled transition equals the reference transition with its id."""
    stored = ref.by_id()
    assert len(buf) == len(stored)
    s = buf.sample(batch_size)
    for b, item_id in enumerate(s.ids.tolist()):
        want = stored[item_id]
        np.testing.assert_array_equal(s.observation[b], want["observation"])
        np.testing.assert_array_equal(s.next_observation[b], want["next_observation"])
        assert s.action[b] == want["action"] and s.reward[b] == want["reward"]
        assert s.terminated[b] == want["terminated"] and s.truncated[b] == want["truncated"]


def play(buf, ref, frames, ops, num_envs, current):
    """Adds one step per op: ``(ends, truncs)``; an ended env starts a new episode."""
    for t, (ends, truncs) in enumerate(ops):
        rows = []
        for r in range(num_envs):
            obs = current[r]
            nxt = frames.advance(obs)
            term, trunc = bool(ends[r]) and not truncs[r], bool(truncs[r])
            rows.append(dict(observation=obs, action=np.int64(t), reward=np.float32(t / 2),
                             next_observation=nxt, terminated=term, truncated=trunc))  # fmt: skip
            current[r] = frames.start() if term or trunc else nxt
        if num_envs == 1:  # no env dim
            buf.add(**rows[0])
        else:
            buf.add(**{k: np.stack([row[k] for row in rows]) for k in rows[0]})
        ref.add(rows)


episode_ops = st.lists(
    st.tuples(
        st.lists(st.sampled_from([False, False, False, True]), min_size=3, max_size=3),
        st.lists(st.sampled_from([False, False, False, False, True]), min_size=3, max_size=3),
    ),
    min_size=1,
    max_size=24,
)


@settings(max_examples=30, deadline=None)
@given(
    num_envs=st.integers(1, 3), max_length=st.integers(2, 6), ops=episode_ops,
    prioritized=st.booleans(), seed=st.integers(0, 99),
)  # fmt: skip
def test_memmap_transitions_match_the_reference_through_wraparound_episode_ends_and_reload(
    tmp_path_factory, num_envs, max_length, ops, prioritized, seed
):
    """Episode ends, truncations and wraparound on disk; then save/load (the way a
    TransitionBuffer directory is kept) gives the same transitions."""
    tmp = tmp_path_factory.mktemp("tm")
    buf = make(tmp, num_envs, max_length, seed, prioritized)
    ref = ReferenceTransitions(num_envs, max_length)
    frames = Frames(seed)
    current = [frames.start() for _ in range(num_envs)]
    play(buf, ref, frames, [(e[:num_envs], u[:num_envs]) for e, u in ops], num_envs, current)
    check_against(buf, ref)
    if prioritized:  # priorities change what is drawn, never what a drawn id holds
        s = buf.sample(8)
        buf.update_priorities(s.ids, np.arange(1, 9, dtype=np.float64))
        check_against(buf, ref)
    buf.save(tmp / "ckpt")
    back = rc.TransitionBuffer.load(tmp / "ckpt")
    check_against(back, ref)
    more = [([False] * num_envs, [False] * num_envs)] * 3  # the loaded chains go on
    play(back, ref, frames, more, num_envs, current)
    check_against(back, ref)


@pytest.mark.parametrize("prioritized", [False, True])
def test_memmap_samples_equal_the_ram_buffer_with_n_step(tmp_path, prioritized):
    """The same adds and seed: the memmap buffer draws and returns what the RAM one does,
    with 1-step and n-step (discounted) samples."""
    bufs = [make(tmp_path, 2, 16, 3, prioritized, storage) for storage in ("memmap", "numpy")]
    ends = itertools.cycle([False] * 6 + [True])
    ops = [([next(ends), False], [False, False]) for _ in range(40)]
    for buf in bufs:
        frames, ref = Frames(5), ReferenceTransitions(2, 16)
        current = [frames.start(), frames.start()]
        play(buf, ref, frames, ops, 2, current)
    for kwargs in ({}, {"n_step": 3, "discount": 0.9}):
        disk, ram = (b.sample(32, **kwargs) for b in bufs)
        for field in ("ids", "observation", "next_observation", "reward", "action",
                      "terminated", "truncated", "discount", "probabilities"):  # fmt: skip
            np.testing.assert_array_equal(getattr(disk, field), getattr(ram, field), field)
    assert isinstance(bufs[0].replay_buffer.storage.nbytes, int)
    assert any((tmp_path / "buf").glob("compressed-*.blocks"))  # the frames are on disk


def test_memmap_directory_errors(tmp_path):
    with pytest.raises(InvalidArgumentError, match="`directory` is required with storage='memmap'"):
        rc.TransitionBuffer(8, storage="memmap")
    with pytest.raises(InvalidArgumentError, match="only allowed with it; got storage='numpy'"):
        rc.TransitionBuffer(8, directory=tmp_path)
    with pytest.raises(InvalidArgumentError, match=r"`storage` must be one of \('numpy', 'memm"):
        rc.TransitionBuffer(8, storage="disk", directory=tmp_path)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match=r"needs a new or empty directory.*holds files"):
        rc.TransitionBuffer(8, storage="memmap", directory=tmp_path / "used")
    with pytest.raises(InvalidArgumentError, match=r"needs a new or empty directory.*is a file"):
        rc.TransitionBuffer(8, storage="memmap", directory=tmp_path / "used" / "x")
