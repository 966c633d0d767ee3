"""recollect.sb3 buffers against SB3's own buffers: same transitions, same counters."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
import torch as th
from gymnasium.wrappers import TimeLimit
from stable_baselines3.common import buffers as sb3_buffers
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecFrameStack,
    VecNormalize,
    VecTransposeImage,
)

import recollect
import recollect.sb3
from recollect.errors import CheckpointError, InvalidArgumentError, NotEnoughDataError
from sb3_streams import DictEnv, ImageEnv, vec_env_stream


def cartpole_venv(n_envs: int, max_steps: int = 16) -> DummyVecEnv:
    """CartPole with a short TimeLimit: terminations and truncations both happen."""
    return DummyVecEnv([lambda: TimeLimit(gym.make("CartPole-v1").unwrapped, max_steps)] * n_envs)


def image_venv(n_envs: int, transpose: bool) -> VecFrameStack:
    venv = VecFrameStack(DummyVecEnv([lambda: TimeLimit(ImageEnv(), 11)] * n_envs), n_stack=4)
    return VecTransposeImage(venv) if transpose else venv


def feed(buffers: list, stream) -> None:
    for args in stream:
        for buf in buffers:
            buf.add(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        ours = buffers[-1]
        assert (ours.pos, ours.full, ours.size()) == (
            buffers[0].pos,
            buffers[0].full,
            buffers[0].size(),
        )


def sb3_at(sb3_buf, batch_inds, env_inds, env=None, monkeypatch=None):
    """SB3's own ``_get_samples`` at the given env indices (its env draw patched)."""
    monkeypatch.setattr(np.random, "randint", lambda *a, **k: env_inds)
    try:
        return sb3_buf._get_samples(batch_inds, env=env)
    finally:
        monkeypatch.undo()


def assert_same(ours, theirs, exact: bool = True) -> None:
    for name in ("observations", "actions", "next_observations", "dones", "rewards", "discounts"):
        a, b = getattr(ours, name), getattr(theirs, name)
        if a is None or b is None:
            assert a is None and b is None, name
            continue
        pairs = a.items() if isinstance(a, dict) else [(None, a)]
        for key, x in pairs:
            y = b if key is None else b[key]
            assert x.dtype == y.dtype and x.shape == y.shape, (name, key, x.dtype, y.dtype)
            if exact or name in ("observations", "next_observations", "dones", "actions"):
                assert th.equal(x, y), (name, key)
            else:
                assert th.allclose(x, y, rtol=1e-6, atol=1e-6), (name, key)


def compare(ours, theirs, monkeypatch, batch_size=256, env=None, exact=True) -> None:
    draw = ours.draw(batch_size, env=env)
    batch_inds, env_inds = ours.locate(draw.ids)
    assert_same(draw.samples, sb3_at(theirs, batch_inds, env_inds, env, monkeypatch), exact)


@pytest.mark.parametrize("n_envs", [1, 3])
def test_samples_equal_sb3_by_index_with_truncations_and_autoresets(n_envs, monkeypatch):
    venv = cartpole_venv(n_envs)
    args = (60 * n_envs, venv.observation_space, venv.action_space)
    theirs = sb3_buffers.ReplayBuffer(*args, device="cpu", n_envs=n_envs)
    ours = recollect.sb3.ReplayBuffer(*args, device="cpu", n_envs=n_envs, rng=1)
    stream = list(vec_env_stream(venv, 150, seed=n_envs))
    assert any(info.get("TimeLimit.truncated") for *_, infos in stream for info in infos)
    assert any(
        d and not i.get("TimeLimit.truncated")
        for *_, ds, infos in stream
        for d, i in zip(ds, infos, strict=True)
    )
    for chunk in (stream[:4], stream[4:60], stream[60:]):  # before, around and after wrapping
        feed([theirs, ours], chunk)
        compare(ours, theirs, monkeypatch)
    assert ours.full and theirs.full


def test_samples_equal_sb3_with_vecnormalize(monkeypatch):
    venv = cartpole_venv(2)
    norm = VecNormalize(cartpole_venv(2), clip_obs=0.5, clip_reward=0.3)
    norm.reset()
    for _ in range(20):  # some statistics
        norm.step(np.zeros(2, np.int64))
    norm.training = False
    args = (40, venv.observation_space, venv.action_space)
    theirs = sb3_buffers.ReplayBuffer(*args, device="cpu", n_envs=2)
    ours = recollect.sb3.ReplayBuffer(*args, device="cpu", n_envs=2, rng=2)
    feed([theirs, ours], vec_env_stream(venv, 33))
    compare(ours, theirs, monkeypatch, env=norm)


@pytest.mark.parametrize("n_step", [2, 4])
def test_n_step_samples_equal_sb3_nstep_buffer(n_step, monkeypatch):
    venv = cartpole_venv(3, max_steps=12)
    args = (45, venv.observation_space, venv.action_space)
    theirs = sb3_buffers.NStepReplayBuffer(*args, "cpu", 3, n_steps=n_step, gamma=0.9)
    ours = recollect.sb3.ReplayBuffer(*args, "cpu", 3, n_step=n_step, gamma=0.9, rng=3)
    stream = list(vec_env_stream(venv, 40, seed=4))
    feed([theirs, ours], stream[:10])
    compare(ours, theirs, monkeypatch, exact=False)
    feed([theirs, ours], stream[10:])
    compare(ours, theirs, monkeypatch, exact=False)


def test_dict_spaces_equal_sb3_dict_buffer(monkeypatch):
    venv = DummyVecEnv([lambda: TimeLimit(DictEnv(), 7)] * 2)
    args = (24, venv.observation_space, venv.action_space)
    theirs = sb3_buffers.DictReplayBuffer(*args, device="cpu", n_envs=2)
    ours = recollect.sb3.ReplayBuffer(*args, device="cpu", n_envs=2, rng=4)
    feed([theirs, ours], vec_env_stream(venv, 30))
    draw = ours.draw(64)
    assert type(draw.samples).__name__ == "DictReplayBufferSamples"
    compare(ours, theirs, monkeypatch)


@pytest.mark.parametrize("transpose", [False, True])
def test_frame_stack_samples_equal_sb3_and_store_one_frame(transpose, monkeypatch):
    venv = image_venv(4, transpose)
    assert venv.observation_space.shape == ((4, 12, 12) if transpose else (12, 12, 4))
    args = (200, venv.observation_space, venv.action_space)
    theirs = sb3_buffers.ReplayBuffer(*args, device="cpu", n_envs=4)
    ours = recollect.sb3.ReplayBuffer(*args, device="cpu", n_envs=4, frame_stack=4, rng=5)
    plain = recollect.sb3.ReplayBuffer(*args, device="cpu", n_envs=4, rng=5)
    feed([theirs, plain, ours], vec_env_stream(venv, 80))
    compare(ours, theirs, monkeypatch, batch_size=512)
    frame = 12 * 12
    assert ours.nbytes < plain.nbytes / 2
    assert ours.transitions.replay_buffer.storage.nbytes / 200 < frame + 32  # one frame per step


def test_frame_stack_rejects_an_episode_start_that_is_not_zero_padded():
    space = gym.spaces.Box(0, 255, (6, 6, 4), np.uint8)
    buf = recollect.sb3.ReplayBuffer(10, space, gym.spaces.Discrete(2), "cpu", frame_stack=4)
    obs = np.ones((1, 6, 6, 4), np.uint8)
    with pytest.raises(InvalidArgumentError, match=r"env\(s\) \[0\].*not 'zero' padding"):
        buf.add(obs, obs, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    assert buf.size() == 0
    obs[..., :3] = 0
    buf.add(obs, obs + 1, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    assert buf.size() == 1


def test_pos_full_size_and_reset_follow_sb3():
    space, act = gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(2)
    theirs = sb3_buffers.ReplayBuffer(7, space, act, "cpu", n_envs=2)
    ours = recollect.sb3.ReplayBuffer(7, space, act, "cpu", n_envs=2)
    assert ours.buffer_size == theirs.buffer_size == 3
    with pytest.raises(NotEnoughDataError):
        ours.sample(4)
    step = (np.zeros((2, 2)), np.ones((2, 2)), np.zeros(2), np.ones(2), np.zeros(2), [{}, {}])
    for _ in range(4):
        feed([theirs, ours], [step])
    ours.reset()
    theirs.reset()
    assert (ours.pos, ours.full, ours.size()) == (0, False, 0)
    with pytest.raises(NotEnoughDataError):
        ours.sample(4)
    feed([theirs, ours], [step])
    assert ours.sample(4).observations.shape == (4, 2)


def test_sb3_learns_with_it_through_replay_buffer_class():
    from stable_baselines3 import DQN

    model = DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=50,
        buffer_size=300,
        train_freq=4,
        replay_buffer_class=recollect.sb3.ReplayBuffer,
        replay_buffer_kwargs={"n_step": 3},
        policy_kwargs={"net_arch": [16]},
        seed=0,
        device="cpu",
    )
    model.learn(400)
    assert isinstance(model.replay_buffer, recollect.sb3.ReplayBuffer)
    assert model.replay_buffer.size() == 300 and model.replay_buffer.full


def test_save_and_load_replay_buffer_through_sb3_pickle(tmp_path):
    from stable_baselines3 import DQN

    kw = dict(learning_starts=10, buffer_size=100, policy_kwargs={"net_arch": [8]}, device="cpu")
    cls = recollect.sb3.ReplayBuffer
    model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=cls, seed=1, **kw)
    model.learn(150)
    model.save_replay_buffer(tmp_path / "rb.pkl")
    other = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=cls, seed=2, **kw)
    other.load_replay_buffer(tmp_path / "rb.pkl")
    a, b = model.replay_buffer, other.replay_buffer
    assert (a.pos, a.full, a.size()) == (b.pos, b.full, b.size())
    assert_same(a.sample(64), b.sample(64))  # same data, same RNG state
    other.learn(20, reset_num_timesteps=False)


@pytest.mark.parametrize("prioritized", [False, True])
def test_checkpoint_round_trip_is_pickle_free_and_continues(tmp_path, prioritized):
    venv = DummyVecEnv([lambda: TimeLimit(DictEnv(), 7)] * 2)
    cls = recollect.sb3.PrioritizedReplayBuffer if prioritized else recollect.sb3.ReplayBuffer
    kw = {"beta": recollect.LinearSchedule(0.4, 1.0, 50)} if prioritized else {}
    spaces = (venv.observation_space, venv.action_space)
    buf = cls(40, *spaces, "cpu", 2, n_step=2, rng=6, **kw)
    stream = list(vec_env_stream(venv, 30))
    for args in stream[:25]:
        buf.add(*args)
    if prioritized:
        s = buf.sample(8)
        buf.update_priorities(s.ids, np.arange(8.0))
    buf.save_checkpoint(tmp_path / "ckpt")
    buf.save_checkpoint(tmp_path / "ckpt")  # replaces the previous checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert not list((tmp_path / "ckpt").rglob("*.pkl"))
    loaded = cls.load_checkpoint(tmp_path / "ckpt", *spaces, device="cpu")
    for args in stream[25:]:  # continues the chains
        buf.add(*args)
        loaded.add(*args)
    assert (loaded.pos, loaded.full, loaded.num_added) == (buf.pos, buf.full, buf.num_added)
    assert_same(buf.sample(32), loaded.sample(32))
    if prioritized:
        with pytest.raises(CheckpointError, match="load it with that class"):
            recollect.sb3.ReplayBuffer.load_checkpoint(tmp_path / "ckpt", *spaces)


def test_frame_stack_buffers_save_and_load_both_ways(tmp_path):
    venv = image_venv(2, transpose=True)
    spaces = (venv.observation_space, venv.action_space)
    buf = recollect.sb3.ReplayBuffer(40, *spaces, "cpu", 2, frame_stack=4)
    for args in vec_env_stream(venv, 30):
        buf.add(*args)
    buf.save_checkpoint(tmp_path / "ckpt")
    copies = [
        recollect.sb3.ReplayBuffer.load_checkpoint(tmp_path / "ckpt", *spaces),
        pickle.loads(pickle.dumps(buf)),
    ]
    want = buf.transitions.sample(16)
    for copy in copies:
        got = copy.transitions.sample(16)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.observation, want.observation)
        np.testing.assert_array_equal(got.next_observation, want.next_observation)
    assert (copies[0].pos, copies[0].full) == (buf.pos, buf.full)


def test_checkpoint_refuses_to_replace_another_directory(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("x")
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    buf = recollect.sb3.ReplayBuffer(4, space, gym.spaces.Discrete(2), "cpu")
    with pytest.raises(CheckpointError, match="not a recollect SB3 checkpoint"):
        buf.save_checkpoint(tmp_path / "data")
    assert (tmp_path / "data" / "keep.txt").exists()


def test_prioritized_samples_weights_ids_and_priorities_steer_sampling():
    space, act = gym.spaces.Box(-1, 1, (1,), np.float32), gym.spaces.Discrete(2)
    buf = recollect.sb3.PrioritizedReplayBuffer(
        10, space, act, "cpu", alpha=1.0, beta=recollect.LinearSchedule(0.0, 1.0, 10), rng=7
    )
    for i in range(10):
        o = np.full((1, 1), i, np.float32)
        buf.add(o, o + 1, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    s = buf.sample(16)
    assert isinstance(s, recollect.sb3.PrioritizedReplayBufferSamples)
    assert s.weights.shape == (16, 1) and s.weights.dtype == th.float32 and s.ids.shape == (16,)
    assert buf.current_beta() == 1.0
    draw = buf.draw(500)
    ids, first = np.unique(draw.ids, return_index=True)
    assert len(ids) == 10
    obs = draw.samples.observations[first, 0]
    prios = th.where(obs == 9, 5.0, 0.0).double()  # a tensor, as DQN.train passes them
    assert buf.update_priorities(ids, prios) == 0
    again = buf.sample(200).observations[:, 0]
    assert (again == 9).float().mean() > 0.99
    with pytest.raises(InvalidArgumentError):
        buf.update_priorities(ids, -np.ones(10))


def test_bad_arguments_raise_named_errors():
    space, act = gym.spaces.Box(-1, 1, (5, 4, 3), np.float32), gym.spaces.Discrete(2)
    args = (8, space, act, "cpu")
    with pytest.raises(InvalidArgumentError, match="storage='memmap' is not available"):
        recollect.sb3.ReplayBuffer(*args, storage="memmap", directory="x")
    with pytest.raises(InvalidArgumentError, match="frame_stack=4 needs an observation"):
        recollect.sb3.ReplayBuffer(*args, frame_stack=4)
    with pytest.raises(InvalidArgumentError, match="not both"):
        recollect.sb3.ReplayBuffer(*args, n_step=2, n_steps=3)
    with pytest.raises(InvalidArgumentError, match="n_step"):
        recollect.sb3.ReplayBuffer(*args, n_step=0)
    buf = recollect.sb3.ReplayBuffer(*args)
    obs = np.zeros((1, 5, 4, 3), np.float32)
    with pytest.raises(InvalidArgumentError, match="n_envs=1 dicts"):
        buf.add(obs, obs, np.zeros(1), np.zeros(1), np.zeros(1), [{}, {}])
    with pytest.raises(InvalidArgumentError, match=r"shape \(1, 5, 4, 3\)"):
        buf.add(obs[..., :2], obs, np.zeros(1), np.zeros(1), np.zeros(1), [{}])
    assert buf.size() == 0


def test_import_recollect_does_not_import_sb3_or_torch():
    code = (
        "import sys, recollect; print('stable_baselines3' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_sb3_module_reads_no_private_recollect_attribute():
    root = Path(recollect.__file__).parent / "sb3"
    sb3_internals = {"self._update_learning_rate", "self._vec_normalize_env", "self._n_updates"}
    for path in root.glob("*.py"):
        found = set(re.findall(r"\w+\._[a-z]\w*", path.read_text())) - sb3_internals
        assert not found, (path.name, found)


def test_pickle_of_an_empty_buffer():
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    buf = recollect.sb3.PrioritizedReplayBuffer(4, space, gym.spaces.Discrete(2), "cpu")
    again = pickle.loads(pickle.dumps(buf))
    assert again.size() == 0 and again.alpha == buf.alpha


def test_discrete_observations_equal_sb3(monkeypatch):
    venv = DummyVecEnv([lambda: TimeLimit(gym.make("FrozenLake-v1").unwrapped, 5)] * 2)
    args = (20, venv.observation_space, venv.action_space)
    theirs = sb3_buffers.ReplayBuffer(*args, device="cpu", n_envs=2)
    ours = recollect.sb3.ReplayBuffer(*args, device="cpu", n_envs=2, rng=8)
    feed([theirs, ours], vec_env_stream(venv, 25))
    compare(ours, theirs, monkeypatch)


def test_optimize_memory_usage_models_learn_again_after_a_reset():
    from stable_baselines3 import DQN

    model = DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=20,
        buffer_size=200,
        optimize_memory_usage=True,  # SB3 cuts the last trajectory via buffer.dones[pos]
        replay_buffer_class=recollect.sb3.ReplayBuffer,
        policy_kwargs={"net_arch": [8]},
        device="cpu",
    )
    model.learn(60)
    model.learn(60)  # reset_num_timesteps=True: SB3 writes replay_buffer.dones[pos] = True
    assert model.replay_buffer.size() == 120


def test_readme_sb3_block_runs(tmp_path, monkeypatch):
    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "sb3.md"
    body = page.read_text(encoding="utf-8")
    block = re.findall(r"```python\n(.*?)```", body, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert isinstance(namespace["model"].replay_buffer, recollect.sb3.ReplayBuffer)
    assert (tmp_path / "runs" / "rb.pkl").exists()
