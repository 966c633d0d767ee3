"""Frame-stack storage: sampled stacks equal, bit for bit, what the env returned.

The reference is naive stacked storage: every stacked observation the fake
env produced is kept by its item id, and every sample is checked against it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from frame_stacks import DTYPES, StackingEnvs, check_sample, fill, make_buffer
from recollect.errors import InvalidArgumentError, SpecError

paddings = st.sampled_from(["reset", "zero", "custom"])


@settings(max_examples=60, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(1, 7),
    k=st.integers(1, 4),
    axis=st.sampled_from([0, 1, -1]),
    padding=paddings,
    dtype=st.sampled_from(DTYPES),
    markers=st.sampled_from([("is_last",), ("is_first",), ("is_first", "is_last")]),
    steps=st.integers(1, 30),
    end_prob=st.sampled_from([0.0, 0.2, 0.6]),
    num_steps=st.sampled_from([None, 1, 2, 3]),
    clear_at=st.one_of(st.none(), st.integers(0, 30)),
    seed=st.integers(0, 2**16),
    contiguous=st.booleans(),
)
def test_sampled_stacks_equal_env_observations(
    num_envs,
    max_length,
    k,
    axis,
    padding,
    dtype,
    markers,
    steps,
    end_prob,
    num_steps,
    clear_at,
    seed,
    contiguous,
):
    frame_shape = (2, 3)
    pad = np.full(frame_shape, 7, dtype) if padding == "custom" else padding
    buf = make_buffer(num_envs, max_length, k, axis, pad, dtype, markers, frame_shape, contiguous)
    envs = StackingEnvs(num_envs, frame_shape, dtype, k, axis, pad, seed, end_prob)
    recorded = {}
    fill(buf, envs, steps, markers, recorded, clear_at)
    stored = buf.num_frames() // num_envs
    if buf.table.index.count(num_steps or 1, buf.writer.episode_aware):
        check_sample(buf, recorded, 16, num_steps)
    all_obs = buf.gather_all()["observation"]
    ids = buf.reader.item_ids()
    for e in range(num_envs):
        for j in range(stored):
            np.testing.assert_array_equal(all_obs[e, j], recorded[int(ids[e, j])])


def test_windows_cross_episode_boundaries_when_asked():
    buf = make_buffer(2, 20, 4, -1, "reset", np.uint8, ("is_last",))
    envs = StackingEnvs(2, (2, 3), np.uint8, 4, -1, "reset", 1, 0.3)
    recorded = {}
    fill(buf, envs, 50, ("is_last",), recorded)
    s = buf.sample(64, 4, within_episode=False)
    for b, item in enumerate(s.ids):
        for j in range(4):
            np.testing.assert_array_equal(s.data["observation"][b, j], recorded[item + j])


def test_memory_is_one_frame_per_step_plus_margin():
    buf = make_buffer(8, 1000, 4, -1, "reset", np.uint8, ("is_last",), frame_shape=(84, 84))
    plain = 8 * 1000 * (4 + 1)  # action int32 + is_last
    ring = 1003  # 1000 + 3 frames of history (rows layout, the default)
    frames = (8 * ring + 1) * 84 * 84  # one padding frame
    history = 8 * ring
    assert buf.storage.nbytes == plain + frames + history
    assert buf.nbytes == rc.estimate_memory(
        buf.data_spec, 8000, 8, frame_stacks={"observation": rc.FrameStack(4)}
    )
    # contiguous=True: lanes layout, rounded up to whole 4-frame blocks, one padding block.
    lanes_ring = 1004
    lanes = plain + (8 * lanes_ring + 4) * 84 * 84 + 8 * lanes_ring + buf.table.nbytes
    assert lanes == rc.estimate_memory(
        buf.data_spec, 8000, 8, frame_stacks={"observation": rc.FrameStack(4, contiguous=True)}
    )


def test_contiguous_stacks_equal_strided_view_stacks():
    spec_args = (2, 30, 4, -1, "reset", np.uint8, ("is_last",))
    buf = make_buffer(*spec_args)
    envs = StackingEnvs(2, (2, 3), np.uint8, 4, -1, "reset", 1, 0.3)
    fill(buf, envs, 80, ("is_last",), {})
    strided = buf.sample(16, 2).data["observation"]
    assert strided.shape[-1] == 4
    assert not strided.flags.c_contiguous  # zero-copy view over a frame-major gather
    stacks = buf.gather_all()["observation"]
    lanes = make_buffer(*spec_args, contiguous=True)
    fill(lanes, StackingEnvs(2, (2, 3), np.uint8, 4, -1, "reset", 1, 0.3), 80, ("is_last",), {})
    contiguous = lanes.gather_all()["observation"]
    np.testing.assert_array_equal(stacks, contiguous)


def test_matches_gymnasium_frame_stack_observation():
    gym = pytest.importorskip("gymnasium")
    from gymnasium.wrappers import FrameStackObservation

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (3, 2), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.np_random.integers(0, 255, (3, 2), dtype=np.uint8), {}

        def step(self, action):
            obs = self.np_random.integers(0, 255, (3, 2), dtype=np.uint8)
            return obs, 0.0, bool(self.np_random.random() < 0.15), False, {}

    custom = np.full((3, 2), 9, np.uint8)
    for padding in ("reset", "zero", custom):
        env = FrameStackObservation(Frames(), 4, padding_type=padding)
        spec = {
            "observation": rc.ArraySpec((4, 3, 2), np.uint8),
            "is_first": rc.ArraySpec((), bool),
        }
        stacks = {"observation": rc.FrameStack(4, axis=0, padding=padding)}
        buf = rc.ReplayBuffer(spec, 64, rng=0, frame_stacks=stacks)
        recorded, first = {}, True
        obs, _ = env.reset(seed=3)
        for t in range(200):
            recorded[t] = obs
            buf.add({"observation": obs, "is_first": np.bool_(first)})
            obs, _, term, trunc, _ = env.step(0)
            first = term or trunc
            if first:
                obs, _ = env.reset()
        s = buf.sample(128)
        for b, item in enumerate(s.ids):
            np.testing.assert_array_equal(s.data["observation"][b], recorded[int(item)])


def test_oldest_stored_step_keeps_its_history_after_wraparound():
    buf = make_buffer(1, 3, 4, -1, "zero", np.uint8, ("is_last",))
    envs = StackingEnvs(1, (2, 3), np.uint8, 4, -1, "zero", 5, 0.0)
    recorded = {}
    fill(buf, envs, 11, ("is_last",), recorded)
    all_obs = buf.gather_all()["observation"][0]
    for j, item in enumerate(buf.reader.item_ids()[0]):
        np.testing.assert_array_equal(all_obs[j], recorded[int(item)])
    assert not (all_obs[0] == 0).all(axis=(0, 1)).any()  # no padding: history survived the ring


def test_prioritized_sampling_returns_exact_stacks():
    spec = {
        "observation": rc.ArraySpec((2, 3, 4), np.uint8),
        "action": rc.ArraySpec((), np.int32),
        "is_last": rc.ArraySpec((), bool),
    }
    buf = rc.ReplayBuffer(
        spec,
        40,
        2,
        rng=0,
        sampler=rc.Prioritized(),
        sequence_length=2,
        frame_stacks={"observation": rc.FrameStack(4)},
    )
    envs = StackingEnvs(2, (2, 3), np.uint8, 4, -1, "reset", 2, 0.2)
    recorded = {}
    fill(buf, envs, 35, ("is_last",), recorded)
    s = check_sample(buf, recorded, 32, 2)
    buf.update_priorities(s.ids, np.linspace(0.1, 2.0, 32))
    check_sample(buf, recorded, 32, 2)


@pytest.mark.parametrize(
    ("stacks", "match"),
    [
        ({"observation": rc.FrameStack(3)}, r"has 4 along axis -1, expected stack_size=3"),
        ({"observation": rc.FrameStack(4, axis=3)}, r"axis=3 is out of range"),
        ({"camera": rc.FrameStack(4)}, r"no leaf 'camera'"),
        ({"observation": 4}, r"must be a recollect.FrameStack"),
        (
            {"observation": rc.FrameStack(4, padding=np.zeros((2, 2)))},
            r"custom padding must be one frame of shape \(2, 3\)",
        ),
    ],
)
def test_bad_frame_stacks_are_rejected(stacks, match):
    spec = {"observation": rc.ArraySpec((2, 3, 4), np.uint8), "is_last": rc.ArraySpec((), bool)}
    with pytest.raises((SpecError, InvalidArgumentError), match=match):
        rc.ReplayBuffer(spec, 10, frame_stacks=stacks)


def test_frame_stack_arguments_are_validated():
    with pytest.raises(InvalidArgumentError, match=r"stack_size` must be an int in \[1, 256\]"):
        rc.FrameStack(0)
    with pytest.raises(InvalidArgumentError, match=r"padding` must be 'reset', 'zero'"):
        rc.FrameStack(4, padding="edge")


def test_frame_stacks_need_episode_markers():
    spec = {"observation": rc.ArraySpec((2, 3, 4), np.uint8)}
    with pytest.raises(SpecError, match=r"add a top-level bool scalar 'is_first' or 'is_last'"):
        rc.ReplayBuffer(spec, 10, frame_stacks={"observation": rc.FrameStack(4)})


def test_n_step_transitions_get_exact_next_observation_stacks():
    spec = {
        "observation": rc.ArraySpec((2, 3, 4), np.uint8),
        "action": rc.ArraySpec((), np.int32),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
        "is_terminal": rc.ArraySpec((), bool),
    }
    stacks = {"observation": rc.FrameStack(4, padding="zero")}
    buf = rc.ReplayBuffer(spec, 60, 3, rng=1, frame_stacks=stacks)
    envs = StackingEnvs(3, (2, 3), np.uint8, 4, -1, "zero", 4, 0.25)
    recorded = {}
    for t in range(45):
        obs, _, is_last = envs.step()
        for e in range(3):
            recorded[int(rc.ids.encode(e, t))] = obs[e]
        buf.add_batch(
            {
                "observation": obs,
                "action": np.zeros(3, np.int32),
                "reward": np.ones(3, np.float32),
                "is_last": is_last,
                "is_terminal": is_last,
            }
        )
    s = buf.sample(64, 4, within_episode=False)
    batch = rc.n_step_transitions(s.data, discount=0.9)
    for b, item in enumerate(s.ids):
        np.testing.assert_array_equal(batch["observation"][b], recorded[int(item)])
        k = int(batch["num_steps"][b])
        np.testing.assert_array_equal(batch["next_observation"][b], recorded[int(item) + k])


@pytest.mark.parametrize("padding", ["reset", "zero"])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_transition_buffer_rebuilds_observation_and_next_observation(padding, num_envs):
    envs = StackingEnvs(num_envs, (3, 2), np.uint8, 4, -1, padding, 11, 0.15)
    buf = rc.TransitionBuffer(
        capacity=num_envs * 12, num_envs=num_envs, rng=0, frame_stack=rc.FrameStack(4, -1, padding)
    )
    obs, _, _ = envs.step()
    recorded = {}
    for t in range(40):
        nxt, is_first, _ = envs.step()  # is_first: nxt starts a new episode (obs ended one)
        final = np.where(is_first[:, None, None, None], envs.rng.integers(0, 9, obs.shape), nxt)
        final = final.astype(np.uint8)
        for e in range(num_envs):
            recorded[int(rc.ids.encode(e, t))] = (obs[e], final[e])
        args = (obs, np.zeros(num_envs, np.int64), np.ones(num_envs, np.float32), final, is_first)
        if num_envs == 1:
            args = tuple(a[0] for a in args)
        buf.add(*args)
        obs = nxt
    s = buf.sample(64)
    for b, item in enumerate(s.ids):
        np.testing.assert_array_equal(s.observation[b], recorded[int(item)][0])
        np.testing.assert_array_equal(s.next_observation[b], recorded[int(item)][1])
    naive = num_envs * 12 * (4 * 6 + 8 + 4 + 3)  # stacks, action, reward, three flags
    assert buf.replay_buffer.nbytes < naive
