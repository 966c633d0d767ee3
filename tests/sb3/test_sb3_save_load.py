"""SB3's ``save_replay_buffer`` / ``load_replay_buffer`` with recollect.sb3 buffers.

SB3 pickles the buffer object (``save_to_pkl``) and, on load, sets the
buffer's ``device`` to the model's. A recollect buffer must survive that: the
same arrays, counters and options come back, adds and training go on, and the
pickle costs what SB3's own costs: the arrays written once, no second copy of
them in memory when saving or loading.
"""

from __future__ import annotations

import copy
import ctypes
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium as gym
import torch as th
from stable_baselines3.common.save_util import load_from_pkl, save_to_pkl

import recollect.sb3
from recollect.errors import CheckpointError
from recollect.sb3 import persistence

ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def add_steps(buf, steps: int, seed: int = 0, obs_dtype=np.float32) -> None:
    """``steps`` adds of random values (dones and timeouts included) to ``buf``."""
    rng = np.random.default_rng(seed)
    n, shape = buf.n_envs, buf.obs_shape
    for _ in range(steps):
        obs = rng.integers(0, 200, (n, *shape)).astype(obs_dtype)
        nxt = rng.integers(0, 200, (n, *shape)).astype(obs_dtype)
        done = rng.random(n) < 0.2
        infos = [{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in done]
        action = rng.integers(0, 3, (n, 1))
        buf.add(obs, nxt, action, rng.standard_normal(n).astype(np.float32), done, infos)


def image_buffer(size: int, **kwargs):
    space = gym.spaces.Box(0, 255, (32, 32, 4), np.uint8)
    return recollect.sb3.ReplayBuffer(size, space, gym.spaces.Discrete(3), "cpu", **kwargs)


def peak_rss_growth(fn) -> int:
    """Bytes by which this process's peak resident memory grew while ``fn`` ran."""
    if not sys.platform.startswith("linux"):
        pytest.skip("measures peak memory through Linux's /proc/self")

    def status(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(key)

    try:  # memory freed by earlier tests goes back to the system, else reuse hides growth
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pytest.skip("needs glibc's malloc_trim")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to now
    except OSError:
        pytest.skip("/proc/self/clear_refs is not writable here")
    before = status("VmRSS")
    fn()
    return status("VmHWM") - before


def test_save_replay_buffer_writes_the_arrays_without_copying_them(tmp_path):
    buf = image_buffer(4000)
    add_steps(buf, 4000, obs_dtype=np.uint8)  # full: the pickle holds every slot
    data = buf.nbytes
    assert data > 30e6
    path = tmp_path / "rb.pkl"
    growth = peak_rss_growth(lambda: save_to_pkl(path, buf))
    assert growth < data / 4, (growth, data)  # no in-memory copy of the storage
    assert data <= path.stat().st_size < 1.05 * data


def test_load_replay_buffer_holds_the_data_once(tmp_path):
    buf = image_buffer(4000)
    add_steps(buf, 4000, obs_dtype=np.uint8)
    save_to_pkl(tmp_path / "rb.pkl", buf)
    loaded = []
    growth = peak_rss_growth(lambda: loaded.append(load_from_pkl(tmp_path / "rb.pkl")))
    assert growth < 1.5 * buf.nbytes, (growth, buf.nbytes)  # SB3's own: once
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(loaded[0], name), getattr(buf, name), name)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"handle_timeout_termination": False},
        {"optimize_memory_usage": True},
        {"compression": "zlib"},
        {"n_step": 3, "gamma": 0.9},
    ],
    ids=["sb3-layout", "no-timeouts", "one-copy", "compressed", "n-step"],
)
def test_a_pickled_buffer_samples_and_adds_as_the_original(options):
    buf = image_buffer(60, n_envs=2, rng=5, **options)
    add_steps(buf, 45, obs_dtype=np.uint8)
    again = pickle.loads(pickle.dumps(buf, protocol=pickle.HIGHEST_PROTOCOL))
    assert (again.pos, again.full, again.num_added) == (buf.pos, buf.full, buf.num_added)
    assert again.handle_timeout_termination == buf.handle_timeout_termination
    assert (again.storage, again.compression, again.n_step) == (
        buf.storage,
        buf.compression,
        buf.n_step,
    )
    for b in (buf, again):
        add_steps(b, 20, seed=1, obs_dtype=np.uint8)  # wraps the ring
    first, second = buf.draw(64), again.draw(64)  # same data, same RNG state
    np.testing.assert_array_equal(first.ids, second.ids)
    for name in ("observations", "next_observations", "actions", "rewards", "dones"):
        assert th.equal(getattr(first.samples, name), getattr(second.samples, name)), name


def test_a_pickled_prioritized_buffer_keeps_its_priorities_and_takes_updates():
    space = gym.spaces.Box(0, 255, (32, 32, 4), np.uint8)
    buf = recollect.sb3.PrioritizedReplayBuffer(40, space, gym.spaces.Discrete(3), "cpu", rng=2)
    add_steps(buf, 30, obs_dtype=np.uint8)
    draw = buf.draw(16)
    buf.update_priorities(draw.ids, np.arange(16.0))
    again = pickle.loads(pickle.dumps(buf, protocol=pickle.HIGHEST_PROTOCOL))
    first, second = buf.draw(64), again.draw(64)
    np.testing.assert_array_equal(first.ids, second.ids)
    np.testing.assert_array_equal(first.weights, second.weights)
    for b in (buf, again):
        b.update_priorities(first.ids, np.ones(64))
    np.testing.assert_array_equal(buf.draw(32).ids, again.draw(32).ids)


def test_a_compressed_buffer_pickles_compressed():
    plain, packed = image_buffer(200), image_buffer(200, compression="zlib")
    frames = np.zeros((201, 1, 32, 32, 4), np.uint8)
    frames[np.arange(201), 0, np.arange(201) % 32] = np.arange(201)[:, None, None] % 256
    for t in range(200):  # one episode of compressible frames
        for buf in (plain, packed):
            buf.add(frames[t], frames[t + 1], np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])
    data = pickle.dumps(packed)
    assert len(data) < 0.5 * len(pickle.dumps(plain))
    np.testing.assert_array_equal(pickle.loads(data).draw(8).ids.shape, (8,))


def test_a_copy_has_its_own_storage():
    buf = image_buffer(20)
    add_steps(buf, 5, obs_dtype=np.uint8)
    before = buf.observations.copy()
    for other in (copy.copy(buf), copy.deepcopy(buf)):
        add_steps(other, 10, seed=3, obs_dtype=np.uint8)
        np.testing.assert_array_equal(buf.observations, before)
        assert buf.pos == 5 and other.pos == 15


def test_a_damaged_pickle_raises_checkpoint_error():
    buf = image_buffer(20)
    add_steps(buf, 5, obs_dtype=np.uint8)
    state = buf.__getstate__()
    columns = state["storage_state"]["state"]["storage"]["columns"]
    (rewards,) = [name for name in columns if name.endswith("rewards")]
    columns[rewards] = columns[rewards][:, :3].copy()
    again = object.__new__(type(buf))
    with pytest.raises(CheckpointError, match=r"pickled replay buffer.*damaged"):
        again.__setstate__(state)


def test_pickles_of_earlier_versions_still_load(tmp_path):
    """Earlier versions pickled the files of the storage's checkpoint directory."""
    buf = image_buffer(20, rng=3)
    add_steps(buf, 25, obs_dtype=np.uint8)
    state = dict(buf.__dict__)
    transitions = state.pop("transitions")
    state.pop("write_leaves")
    transitions.save(tmp_path / "t")
    files = tmp_path / "t"
    state["transitions"] = {
        str(p.relative_to(files)): p.read_bytes() for p in files.rglob("*") if p.is_file()
    }
    old = object.__new__(type(buf))
    old.__setstate__(state)
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(old, name), getattr(buf, name), name)
    assert (old.pos, old.full) == (buf.pos, buf.full)
    add_steps(old, 3, obs_dtype=np.uint8)


def test_load_replay_buffer_into_a_model_keeps_options_follows_its_device_and_learns():
    from stable_baselines3 import DQN

    kw = dict(
        learning_starts=40,
        buffer_size=100,
        train_freq=8,
        replay_buffer_class=recollect.sb3.ReplayBuffer,
        replay_buffer_kwargs={"handle_timeout_termination": False},
        policy_kwargs={"net_arch": [8]},
        device="cpu",
    )
    model = DQN("MlpPolicy", "CartPole-v1", seed=1, **kw)
    model.learn(60)
    with tempfile.TemporaryFile() as fp:  # a file object, as SB3 accepts, left open
        model.save_replay_buffer(fp)
        fp.seek(0)
        other = DQN("MlpPolicy", "CartPole-v1", seed=2, **kw)
        other.device = th.device("meta")  # SB3 hands the model's device to the buffer
        other.load_replay_buffer(fp)
        assert not fp.closed
    loaded, saved = other.replay_buffer, model.replay_buffer
    assert isinstance(loaded, recollect.sb3.ReplayBuffer)
    assert loaded.device == th.device("meta")
    assert loaded.sample(4).observations.device.type == "meta"
    assert loaded.handle_timeout_termination is False
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(saved, name), name)
    other.device = loaded.device = th.device("cpu")
    infos = [[{"TimeLimit.truncated": t}] for t in saved.timeouts]
    loaded.extend(saved.observations, saved.observations, saved.actions, saved.rewards,
                  saved.dones, infos)  # fmt: skip
    assert loaded.full
    other.learn(30, reset_num_timesteps=False)


def test_pickle_state_names_its_storage_kind():
    buf = image_buffer(10, optimize_memory_usage=True)
    state = buf.__getstate__()["storage_state"]
    assert state["kind"] == "TransitionBuffer"
    with pytest.raises(CheckpointError, match="lacks its storage state"):
        persistence.storage_from_state({"kind": "TransitionBuffer"}, lambda *a, **k: None)
