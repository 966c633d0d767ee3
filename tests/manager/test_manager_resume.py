"""ReplayBufferManager with an existing checkpoint (issue #14, items 12 and 13)."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError, InvalidArgumentError, ShapeError


def spec() -> dict:
    return {
        "observation": rc.ArraySpec((3,), np.float32),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), np.bool_),
    }


def steps(num_envs: int, value: float = 1.0) -> dict:
    return {
        "observation": np.full((num_envs, 3), value, np.float32),
        "reward": np.full(num_envs, value, np.float32),
        "is_last": np.zeros(num_envs, np.bool_),
    }


def saved(tmp_path, num_envs=2, sequence_length=2):
    """The README's flow: a buffer saved with ``buf.save`` into the manager's directory."""
    buf = rc.ReplayBuffer(spec(), 20, num_envs, rng=0, sequence_length=sequence_length)
    for t in range(5):
        buf.add_batch(steps(num_envs, t))
    buf.save(tmp_path / "ckpt")
    return buf


def test_create_refuses_an_existing_checkpoint_instead_of_overwriting_it(tmp_path):
    saved(tmp_path)
    manager = rc.ReplayBufferManager(spec(), 20, tmp_path / "ckpt", num_envs=2)
    with pytest.raises(
        CheckpointError,
        match=r"already holds a checkpoint.*create_or_load_replay_buffer\(\).*"
        r"overwrite=True",
    ):
        manager.create_replay_buffer()
    buffer, _ = manager.create_replay_buffer(overwrite=True)  # explicit: start over
    assert buffer.num_frames() == 0
    manager.checkpoint()
    assert rc.ReplayBuffer.load(tmp_path / "ckpt").num_frames() == 0


def test_create_or_load_loads_when_a_checkpoint_exists_and_creates_otherwise(tmp_path):
    original = saved(tmp_path)
    kwargs = {"num_envs": 2, "sequence_length": 2}
    with rc.ReplayBufferManager(spec(), 20, tmp_path / "ckpt", **kwargs) as manager:
        buffer, observer = manager.create_or_load_replay_buffer()
        assert buffer.num_frames() == 10
        np.testing.assert_array_equal(buffer.sample(4).ids, original.sample(4).ids)
        observer(steps(2))
        manager.checkpoint()
    with rc.ReplayBufferManager(spec(), 20, tmp_path / "new", **kwargs) as manager:
        buffer, _ = manager.create_or_load_replay_buffer()
        assert buffer.num_frames() == 0 and buffer.num_envs == 2
    assert rc.ReplayBuffer.load(tmp_path / "ckpt").num_frames() == 12


def test_load_raises_when_num_envs_differs_from_the_checkpoint(tmp_path):
    saved(tmp_path, num_envs=2)
    manager = rc.ReplayBufferManager(spec(), checkpoint_dir=tmp_path / "ckpt", num_envs=4)
    with pytest.raises(
        InvalidArgumentError, match=r"has num_envs=2; the manager was given num_envs=4"
    ):
        manager.load_replay_buffer()


def test_load_raises_when_sequence_length_differs_from_the_checkpoint(tmp_path):
    saved(tmp_path, sequence_length=2)
    manager = rc.ReplayBufferManager(checkpoint_dir=tmp_path / "ckpt", sequence_length=3)
    with pytest.raises(
        InvalidArgumentError,
        match=r"has sequence_length=2; the manager was given sequence_length=3",
    ):
        manager.load_replay_buffer()


def test_load_uses_the_checkpoints_num_envs_when_the_manager_was_not_given_one(tmp_path):
    saved(tmp_path, num_envs=2)
    buffer, observer = rc.ReplayBufferManager(checkpoint_dir=tmp_path / "ckpt").load_replay_buffer()
    assert buffer.num_envs == 2
    observer(steps(2))
    assert buffer.num_frames() == 12


def test_load_raises_when_the_sampler_differs_from_the_checkpoint(tmp_path):
    saved(tmp_path)
    manager = rc.ReplayBufferManager(checkpoint_dir=tmp_path / "ckpt", sampler=rc.Fifo())
    with pytest.raises(InvalidArgumentError, match=r"has a Uniform sampler; the manager was given"):
        manager.load_replay_buffer()


def test_a_wrong_env_dim_names_num_envs():
    manager = rc.ReplayBufferManager(spec(), 20, num_envs=2)
    buffer, observer = manager.create_replay_buffer()
    with pytest.raises(
        ShapeError, match=r"expected shape \(2,( 3)?\), got \(3,( 3)?\).*num_envs=2"
    ):
        observer(steps(3))
    with pytest.raises(ShapeError, match=r"num_envs=2.*or create the buffer with num_envs=3"):
        buffer.add_batch(steps(3))
