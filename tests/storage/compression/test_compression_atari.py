"""Real input, compressed: ALE frames through AtariPreprocessing + FrameStackObservation(4).

Every stack sampled from a zstd-compressed frame store equals, bit for bit,
the observation the wrapped env returned (episode starts and wraparound
included), in both stack layouts, and the frames take far less than raw.
"""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.storage import ZstdCodec

NUM_ENVS = 2
STEPS = 1200  # per env: several episodes (time limit 300), the ring wraps twice
MAX_LENGTH = 500


def _make_env(game):
    gym = pytest.importorskip("gymnasium")
    ale_py = pytest.importorskip("ale_py")
    pytest.importorskip("cv2", reason="AtariPreprocessing needs opencv-python")
    pytest.importorskip("zstandard")
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    try:
        env = gym.make(f"ALE/{game}-v5", max_episode_steps=300)
    except Exception as err:  # ROMs missing or ALE unusable: skip, never fail
        pytest.skip(f"ALE/{game}-v5 unavailable: {err}")
    return FrameStackObservation(AtariPreprocessing(env, frame_skip=1), 4)


@pytest.mark.parametrize(
    ("game", "axis", "train_values"), [("Pong", -1, 2048), ("MsPacman", 0, 512), ("Pong", 0, 256)]
)
def test_compressed_atari_stacks_are_exact(game, axis, train_values):
    """``train_values`` 2048 never trains (1,006 frame slots); 256 and 512 train a dictionary
    mid-run (then every frame stored so far is re-encoded with it)."""
    envs = [_make_env(game) for _ in range(NUM_ENVS)]
    shape = (84, 84, 4) if axis == -1 else (4, 84, 84)
    spec = {
        "observation": rc.ArraySpec(shape, np.uint8),
        "action": rc.ArraySpec((), np.int64),
        "is_first": rc.ArraySpec((), bool),
        "is_last": rc.ArraySpec((), bool),
    }
    buf = rc.ReplayBuffer(
        spec,
        NUM_ENVS * MAX_LENGTH,
        NUM_ENVS,
        rng=0,
        frame_stacks={"observation": rc.FrameStack(4, axis=axis)},
        compression={"observation": ZstdCodec(train_values=train_values)},
    )
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    for e, env in enumerate(envs):
        env.action_space.seed(e)
    first = np.ones(NUM_ENVS, bool)
    recorded = {}
    for t in range(STEPS):
        actions = np.array([env.action_space.sample() for env in envs], np.int64)
        out = [env.step(a) for env, a in zip(envs, actions, strict=True)]
        last = np.array([o[2] or o[3] for o in out])
        stacked = np.stack(obs) if axis == 0 else np.moveaxis(np.stack(obs), 1, -1)
        for e in range(NUM_ENVS):
            recorded[int(rc.ids.encode(e, t))] = stacked[e]
        buf.add_batch({"observation": np.ascontiguousarray(stacked), "action": actions,
                       "is_first": first, "is_last": np.zeros(NUM_ENVS, bool)})  # fmt: skip
        obs = [o[0] for o in out]
        for e in np.flatnonzero(last):
            obs[e] = envs[e].reset()[0]
        first = last
    all_obs, ids = buf.gather_all()["observation"], buf.reader.item_ids()
    for e in range(NUM_ENVS):
        for j in range(ids.shape[1]):
            np.testing.assert_array_equal(all_obs[e, j], recorded[int(ids[e, j])])
    s = buf.sample(256, 2)
    for b, item in enumerate(s.ids):
        for j in range(2):
            np.testing.assert_array_equal(s.data["observation"][b, j], recorded[int(item) + j])
    raw_frames = NUM_ENVS * MAX_LENGTH * 84 * 84
    assert buf.nbytes < raw_frames / 2  # zstd: 171 (Pong) to 1,184 (MsPacman) B per frame
    slots = next(iter(buf.storage.compressed_rings().values())).slots
    assert (slots.dictionary is not None) == (train_values < 1006)
