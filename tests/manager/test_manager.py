"""ReplayBufferManager and observers."""

from __future__ import annotations

import collections

import numpy as np
import optree
import pytest

import recollect as rc
from recollect.errors import (
    CheckpointError,
    InvalidArgumentError,
    NotEnoughDataError,
    ShapeError,
    SpecError,
    StateError,
)

Trajectory = collections.namedtuple(  # the TF-Agents layout
    "Trajectory",
    ["step_type", "observation", "action", "policy_info", "next_step_type", "reward", "discount"],
)


def trajectory_spec() -> Trajectory:
    return Trajectory(
        step_type=rc.ArraySpec((), np.int32),
        observation=rc.ArraySpec((4,), np.float32),
        action=rc.ArraySpec((), np.int64),
        policy_info=(),
        next_step_type=rc.ArraySpec((), np.int32),
        reward=rc.ArraySpec((), np.float32),
        discount=rc.ArraySpec((), np.float16),
    )


def trajectory(rng: np.random.Generator, lead: tuple[int, ...]) -> Trajectory:
    return Trajectory(
        step_type=rng.integers(0, 3, lead).astype(np.int32),
        observation=rng.normal(size=(*lead, 4)).astype(np.float32),
        action=rng.integers(0, 2, lead),
        policy_info=(),
        next_step_type=rng.integers(0, 3, lead).astype(np.int32),
        reward=rng.normal(size=lead).astype(np.float32),
        discount=np.ones(lead, np.float16),
    )


class ArrayLike:
    """Anything with ``__array__`` (stands in for framework tensors)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def __array__(self, dtype=None, copy=None):
        return self.value if dtype is None else self.value.astype(dtype)


def rlds_spec() -> dict:
    return {
        "observation": rc.ArraySpec((3,), np.float32),
        "action": rc.ArraySpec((), np.int32),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), np.bool_),
    }


def rlds_steps(rng: np.random.Generator, lead: tuple[int, ...]) -> dict:
    return {
        "observation": rng.normal(size=(*lead, 3)).astype(np.float32),
        "action": rng.integers(0, 5, lead).astype(np.int32),
        "reward": rng.normal(size=lead).astype(np.float32),
        "is_last": rng.random(lead) < 0.2,
    }


def test_create_observe_sample_checkpoint_and_load(tmp_path):
    rng = np.random.default_rng(0)
    kwargs = {"capacity": 64, "checkpoint_dir": tmp_path / "ck", "num_envs": 2}
    with rc.ReplayBufferManager(rlds_spec(), sequence_length=2, rng=1, **kwargs) as manager:
        buffer, observer = manager.create_replay_buffer()
        for _ in range(10):
            observer(rlds_steps(rng, (2,)))
        assert manager.num_frames() == buffer.num_frames() == observer.num_steps == 20
        batch = next(manager.get_dataset(batch_size=8, num_steps=2, framework="numpy"))
        assert batch.data["observation"].shape == (8, 2, 3)
        assert batch.ids.dtype == np.int64 and batch.probabilities.shape == (8,)
        assert manager.checkpoint() == (tmp_path / "ck").absolute()
        expected = buffer.sample(5, 2).ids
    with rc.ReplayBufferManager(rlds_spec(), checkpoint_dir=tmp_path / "ck") as manager:
        buffer, observer = manager.load_replay_buffer()
        assert manager.num_frames() == 20
        np.testing.assert_array_equal(
            next(manager.get_dataset(5, 2, framework="numpy")).ids, expected
        )
        observer(rlds_steps(rng, (2,)))
        assert manager.num_frames() == 22
        manager.clear()
        assert manager.num_frames() == 0


def test_observer_accepts_trajectories_tensors_and_time_dims():
    spec = trajectory_spec()
    manager = rc.ReplayBufferManager(spec, capacity=40, num_envs=2)
    buffer, observer = manager.create_replay_buffer()
    rng = np.random.default_rng(0)
    observer(trajectory(rng, (2,)))  # [num_envs]
    observer(optree.tree_map(ArrayLike, trajectory(rng, (2,))))  # anything with __array__
    observer(trajectory(rng, (2, 3)))  # [num_envs, T]: three steps per env
    as_dict = trajectory(rng, (2,))._asdict()  # same leaf paths, other container
    observer(as_dict)
    assert buffer.num_frames() == 2 * 6 == observer.num_steps


def test_observer_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    manager = rc.ReplayBufferManager(rlds_spec(), capacity=10)
    buffer, observer = manager.create_replay_buffer()
    steps = rlds_steps(np.random.default_rng(0), ())
    tensors = {k: torch.as_tensor(v) for k, v in steps.items()}
    tensors["observation"].requires_grad_(True)
    observer(tensors)  # one step, no env dim (num_envs == 1)
    np.testing.assert_array_equal(buffer.gather_all()["observation"][0, 0], steps["observation"])


def test_observer_rejects_bad_steps_without_writing():
    manager = rc.ReplayBufferManager(rlds_spec(), capacity=20, num_envs=2)
    buffer, observer = manager.create_replay_buffer()
    rng = np.random.default_rng(0)
    with pytest.raises(ShapeError, match="no env dim but the buffer has num_envs=2"):
        observer(rlds_steps(rng, ()))
    bad = rlds_steps(rng, (2,))
    bad["observation"] = bad["observation"][None]
    with pytest.raises(ShapeError, match="leaves must all have no leading dim"):
        observer(bad)
    bad["observation"] = bad["observation"][0, :, :2]
    with pytest.raises(ShapeError, match=r"'observation': expected shape \(2, 3\), got \(2, 2\)"):
        observer(bad)
    missing = rlds_steps(rng, (2,))
    del missing["reward"]
    with pytest.raises(SpecError, match=r"missing leaves \['reward'\]"):
        observer(missing)
    late_bad = rlds_steps(rng, (2, 3))
    late_bad["action"] = late_bad["action"].astype(np.float64) + 0.5  # float into int leaf
    with pytest.raises(rc.errors.DTypeError, match="action"):
        observer(late_bad)
    assert buffer.num_frames() == 0


def test_load_without_a_checkpoint_says_to_create_one(tmp_path):
    manager = rc.ReplayBufferManager(rlds_spec(), 10, checkpoint_dir=tmp_path / "missing")
    with pytest.raises(CheckpointError, match=r"call manager\.create_replay_buffer\(\)"):
        manager.load_replay_buffer()
    (tmp_path / "empty").mkdir()
    manager = rc.ReplayBufferManager(rlds_spec(), 10, checkpoint_dir=tmp_path / "empty")
    with pytest.raises(CheckpointError, match="empty or missing"):
        manager.load_replay_buffer()
    with pytest.raises(InvalidArgumentError, match="needs a checkpoint directory"):
        rc.ReplayBufferManager(rlds_spec(), 10).load_replay_buffer()


def test_load_checks_the_spec_and_capacity_given_to_the_manager(tmp_path):
    with rc.ReplayBufferManager(rlds_spec(), 10, checkpoint_dir=tmp_path / "ck") as manager:
        manager.create_replay_buffer()
        manager.checkpoint()
    other = dict(rlds_spec(), reward=rc.ArraySpec((), np.float64))
    with pytest.raises(InvalidArgumentError, match="the manager's data_spec"):
        rc.ReplayBufferManager(other, checkpoint_dir=tmp_path / "ck").load_replay_buffer()
    with pytest.raises(InvalidArgumentError, match="has capacity=10; the manager was given"):
        rc.ReplayBufferManager(capacity=20, checkpoint_dir=tmp_path / "ck").load_replay_buffer()
    buffer, _ = rc.ReplayBufferManager(checkpoint_dir=tmp_path / "ck").load_replay_buffer()
    assert buffer.capacity == 10


def test_close_is_idempotent_and_stops_everything():
    manager = rc.ReplayBufferManager(rlds_spec(), capacity=10)
    with pytest.raises(StateError, match="no replay buffer yet"):
        manager.get_dataset(2)
    _, observer = manager.create_replay_buffer()
    observer(rlds_steps(np.random.default_rng(0), ()))
    dataset = manager.get_dataset(2, framework="numpy")
    assert next(dataset).ids.shape == (2,)
    manager.close()
    manager.close()
    assert manager.closed
    assert list(dataset) == []
    with pytest.raises(StateError, match="closed"):
        manager.create_replay_buffer()
    with pytest.raises(StateError, match="closed"):
        observer(rlds_steps(np.random.default_rng(0), ()))
    with pytest.raises(StateError, match="closed"):
        manager.get_dataset(2)
    assert manager.num_frames() == 0  # as the seed's manager after close


def test_dataset_raises_until_data_arrives_and_create_needs_a_spec():
    manager = rc.ReplayBufferManager(rlds_spec(), capacity=10)
    manager.create_replay_buffer()
    with pytest.raises(NotEnoughDataError, match="empty buffer"):
        next(manager.get_dataset(4, framework="numpy"))
    with pytest.raises(InvalidArgumentError, match="needs data_spec and capacity"):
        rc.ReplayBufferManager(capacity=10).create_replay_buffer()


def test_sampler_instances_are_copied_for_every_buffer():
    sampler = rc.Uniform()
    manager = rc.ReplayBufferManager(rlds_spec(), capacity=10, sampler=sampler)
    first, _ = manager.create_replay_buffer()
    second, _ = manager.create_replay_buffer()
    assert first.reader.sampler is not second.reader.sampler and first.reader.sampler is not sampler
