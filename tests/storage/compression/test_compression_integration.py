"""Compressed storage behind every front: TransitionBuffer, the SB3 buffer, service shards.

Oracle: the same front without compression, same seed and same inputs: samples
must be equal leaf for leaf (the compressed bytes decode to what was added).
"""

from __future__ import annotations

import numpy as np
import optree
import pytest

import recollect as rc
from frame_stacks import StackingEnvs
from recollect.service import Server
from recollect.storage import ZstdCodec

FIELDS = ("observation", "action", "reward", "next_observation", "terminated", "truncated", "ids")


def _equal(a, b):
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        for u, v in zip(optree.tree_leaves(x), optree.tree_leaves(y), strict=True):
            np.testing.assert_array_equal(u, v)


def _transitions(buf, seed, steps=60, num_envs=2):
    envs = StackingEnvs(num_envs, (6, 5), np.uint8, 4, -1, "reset", seed, 0.1)
    obs, _, _ = envs.step()
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        nxt, _, last = envs.step()
        trunc = rng.random(num_envs) < 0.05
        buf.add(obs, rng.integers(0, 4, num_envs), rng.normal(size=num_envs), nxt, last, trunc)
        obs = nxt


@pytest.mark.parametrize("stack", [None, rc.FrameStack(4)])
def test_transition_buffer_compressed_samples_like_uncompressed(stack, tmp_path):
    a = rc.TransitionBuffer(40, 2, 0, frame_stack=stack, compression={"observation": "zstd"})
    b = rc.TransitionBuffer(40, 2, 0, frame_stack=stack)
    _transitions(a, 1)
    _transitions(b, 1)
    _equal(a.sample(32), b.sample(32))
    a.save(tmp_path / "tb")
    loaded = rc.TransitionBuffer.load(tmp_path / "tb")
    assert loaded.replay_buffer.config()["compression"] == {
        "observation": {"name": "zstd", "level": 1}
    }
    _equal(loaded.sample(32), b.sample(32))


def test_sb3_buffer_compressed_observations_sample_like_uncompressed(tmp_path):
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("stable_baselines3")
    from recollect.sb3 import ReplayBuffer

    obs_space = gym.spaces.Box(0, 255, (6, 5, 4), np.uint8)
    act_space = gym.spaces.Discrete(3)
    codec = ZstdCodec(level=3)
    a = ReplayBuffer(80, obs_space, act_space, "cpu", 2, frame_stack=4, rng=0, compression=codec)
    b = ReplayBuffer(80, obs_space, act_space, "cpu", 2, frame_stack=4, rng=0)
    envs = StackingEnvs(2, (6, 5), np.uint8, 4, -1, "zero", 3, 0.0)
    obs, _, _ = envs.step()
    for t in range(50):
        nxt, _, _ = envs.step()
        done = np.zeros(2, bool)
        infos = [{"TimeLimit.truncated": False}, {"TimeLimit.truncated": False}]
        for buf in (a, b):
            buf.add(obs, nxt, np.array([t % 3, 1]), np.ones(2, np.float32), done, infos)
        obs = nxt
    sa, sb = a.sample(16), b.sample(16)
    for field in ("observations", "next_observations", "actions", "rewards", "dones"):
        np.testing.assert_array_equal(getattr(sa, field).numpy(), getattr(sb, field).numpy())
    assert a.config()["options"]["compression"] == {"name": "zstd", "level": 3}
    a.save_checkpoint(tmp_path / "sb3")
    loaded = ReplayBuffer.load_checkpoint(tmp_path / "sb3", obs_space, act_space, "cpu")
    assert loaded.config()["options"]["compression"] == {"name": "zstd", "level": 3}
    sl, sb = loaded.sample(16), b.sample(16)
    for field in ("observations", "next_observations", "actions"):
        np.testing.assert_array_equal(getattr(sl, field).numpy(), getattr(sb, field).numpy())


def test_service_shards_of_a_compressed_table_keep_compression():
    spec = {"image": rc.ArraySpec((8, 8), np.uint8), "is_last": rc.ArraySpec((), bool)}
    template = rc.ReplayBuffer(spec, 400, 4, compression={"image": "lz4"})
    server = Server({"t": template}, num_shards=2)
    client = server.client()
    rng = np.random.default_rng(0)
    added = []
    with client.writer("t", 2, chunk_length=5) as w1, client.writer("t", 2, chunk_length=5) as w2:
        for _ in range(20):
            for writer in (w1, w2):
                image = rng.integers(0, 4, (2, 8, 8)).astype(np.uint8)
                added.append(image)
                writer.add_batch({"image": image, "is_last": np.zeros(2, bool)})
    for shard in server.shards["t"]:
        assert shard.buffer.config()["compression"] == {"image": {"name": "lz4", "level": 0}}
    sample = client.sample("t", 64)
    pool = {a.tobytes() for batch in added for a in batch}
    assert all(img.tobytes() in pool for img in sample.data["image"])
