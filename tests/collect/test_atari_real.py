"""Real input: ale-py's Pong through gymnasium's Atari preprocessing and frame stacking.

Every stacked observation that comes back from the frame store equals, bit for
bit, the observation the wrapped env returned (episode starts included).
"""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc

NUM_ENVS = 2
STEPS = 1500  # per env: 3,000 steps, several episodes (time limit 400), ring wraps twice
MAX_LENGTH = 600


def _make_env():
    gym = pytest.importorskip("gymnasium")
    ale_py = pytest.importorskip("ale_py")
    pytest.importorskip("cv2", reason="AtariPreprocessing needs opencv-python")
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    try:
        env = gym.make("ALE/Pong-v5", max_episode_steps=400)
    except Exception as err:  # ROMs missing or ALE unusable: skip, never fail
        pytest.skip(f"ALE/Pong-v5 unavailable: {err}")
    env = AtariPreprocessing(env, frame_skip=1)  # v5 already skips 4 frames
    return FrameStackObservation(env, 4)


def test_pong_frame_stacks_are_exact():
    envs = [_make_env() for _ in range(NUM_ENVS)]
    spec = {
        "observation": rc.ArraySpec((4, 84, 84), np.uint8),
        "action": rc.ArraySpec((), np.int64),
        "reward": rc.ArraySpec((), np.float32),
        "is_first": rc.ArraySpec((), bool),
        "is_last": rc.ArraySpec((), bool),
    }
    buf = rc.ReplayBuffer(
        spec,
        NUM_ENVS * MAX_LENGTH,
        NUM_ENVS,
        rng=0,
        frame_stacks={"observation": rc.FrameStack(4, axis=0, padding="reset")},
    )
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    first = np.ones(NUM_ENVS, bool)
    recorded, starts = {}, 0
    for t in range(STEPS):
        actions = np.array([env.action_space.sample() for env in envs], np.int64)
        step_out = [env.step(a) for env, a in zip(envs, actions, strict=True)]
        last = np.array([o[2] or o[3] for o in step_out])
        for e in range(NUM_ENVS):
            recorded[int(rc.ids.encode(e, t))] = obs[e]
        buf.add_batch(
            {
                "observation": np.stack(obs),
                "action": actions,
                "reward": np.array([o[1] for o in step_out], np.float32),
                "is_first": first,
                "is_last": np.zeros(NUM_ENVS, bool),
            }
        )
        starts += int(first.sum())
        obs = [o[0] for o in step_out]
        for e in np.flatnonzero(last):
            obs[e] = envs[e].reset()[0]
        first = last
    assert starts > NUM_ENVS  # several episodes were stored
    all_obs, ids = buf.gather_all()["observation"], buf.reader.item_ids()
    for e in range(NUM_ENVS):
        for j in range(ids.shape[1]):
            np.testing.assert_array_equal(all_obs[e, j], recorded[int(ids[e, j])])
    s = buf.sample(256, 2)
    for b, item in enumerate(s.ids):
        for j in range(2):
            np.testing.assert_array_equal(s.data["observation"][b, j], recorded[int(item) + j])
    assert buf.nbytes < NUM_ENVS * MAX_LENGTH * (84 * 84 + 100)
