"""ReplayBufferManager keeps the seed manager's contract (sbsim's Reverb-backed
``ReplayBufferManager``): ``num_frames`` is 0 without a buffer, ``get_dataset`` has the
seed's defaults and gives a ``tf.data.Dataset``, ``get_replay_buffer_and_observer``
exists, and a directory holding dm-reverb's checkpoint is never read as empty."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError, InvalidArgumentError
from recollect.manager.checks import reverb_checkpoint

tf = pytest.importorskip("tensorflow")


def spec() -> dict[str, rc.ArraySpec]:
    return {
        "observation": rc.ArraySpec((3,), np.float32),
        "reward": rc.ArraySpec((), np.float32),
    }


def steps(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "observation": rng.normal(size=(n, 3)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
    }


def filled(tmp_path, sequence_length: int | None = 2) -> rc.ReplayBufferManager:
    manager = rc.ReplayBufferManager(
        spec(), 100, tmp_path / "ck", sequence_length, num_envs=2, rng=0
    )
    _, observer = manager.create_replay_buffer()
    rng = np.random.default_rng(1)
    for _ in range(10):
        observer(steps(rng, 2))
    return manager


def test_num_frames_is_zero_before_a_buffer_and_after_close(tmp_path):
    manager = rc.ReplayBufferManager(spec(), 100, tmp_path / "ck")
    assert manager.num_frames() == 0
    _, observer = manager.create_replay_buffer()
    observer(steps(np.random.default_rng(0), 1))
    assert manager.num_frames() == 1
    manager.close()
    assert manager.num_frames() == 0


def test_get_dataset_defaults_give_a_tf_dataset_of_sequence_length_windows(tmp_path):
    with filled(tmp_path) as manager:
        dataset = manager.get_dataset()  # the seed's defaults: 64 windows, sequence_length
        assert isinstance(dataset, tf.data.Dataset)
        items, info = next(iter(dataset))
        assert items["observation"].shape == (64, 2, 3)
        assert info.ids.shape == (64,)
    with filled(tmp_path / "single", sequence_length=None) as manager:
        items, _ = next(iter(manager.get_dataset()))  # no sequence_length: single steps
        assert items["observation"].shape == (64, 3)
        items, _ = next(iter(manager.get_dataset(8, 3)))
        assert items["observation"].shape == (8, 3, 3)


def test_get_dataset_numpy_iterator_keeps_sample_options(tmp_path):
    with filled(tmp_path) as manager:
        sample = next(manager.get_dataset(framework="numpy"))
        assert isinstance(sample, rc.Sample)
        assert sample.data["observation"].shape == (64, 2, 3)
        with pytest.raises(InvalidArgumentError, match="pass framework='numpy'"):
            manager.get_dataset(4, importance_sampling_exponent=0.5)
        with pytest.raises(InvalidArgumentError, match="'auto', 'tf' or 'numpy'"):
            manager.get_dataset(4, framework="torch")  # type: ignore[arg-type]


def test_get_replay_buffer_and_observer_creates_then_returns_the_same(tmp_path):
    manager = rc.ReplayBufferManager(spec(), 100, tmp_path / "ck", num_envs=2)
    buffer, observer = manager.get_replay_buffer_and_observer()
    assert manager.get_replay_buffer_and_observer() == (buffer, observer)
    observer(steps(np.random.default_rng(0), 2))
    manager.checkpoint()
    manager.close()
    # a new manager on the same directory continues the checkpoint, as the seed's
    # manager does through its Reverb checkpointer
    again = rc.ReplayBufferManager(spec(), 100, tmp_path / "ck", num_envs=2)
    restored, _ = again.get_replay_buffer_and_observer()
    assert restored is not buffer and again.num_frames() == 2
    again.close()


def fake_reverb_checkpoint(root, name: str = "2026-11-28T05:37:49.5+00:00"):
    folder = root / name
    folder.mkdir(parents=True)
    for file in ("tables.tfrecord", "chunks.tfrecord", "items.tfrecord", "DONE"):
        (folder / file).write_bytes(b"")
    return folder


def test_a_directory_of_reverb_checkpoints_is_refused_not_read_as_empty(tmp_path):
    root = tmp_path / "ck"
    fake_reverb_checkpoint(root, "2026-01-01T00:00:00+00:00")
    latest = fake_reverb_checkpoint(root)
    (root / "2027-unfinished").mkdir()  # no DONE: not a checkpoint
    assert reverb_checkpoint(root) == latest
    manager = rc.ReplayBufferManager(spec(), 100, root)
    for call in (manager.create_or_load_replay_buffer, manager.load_replay_buffer,
                 manager.create_replay_buffer, manager.get_replay_buffer_and_observer):  # fmt: skip
        with pytest.raises(CheckpointError, match=r"holds a Reverb checkpoint .*recollect\.reverb"):
            call()
    assert manager.num_frames() == 0
    buffer, _ = manager.create_replay_buffer(overwrite=True)  # starting over is explicit
    assert buffer.num_frames() == 0


def test_reverb_checkpoint_detection_needs_the_done_file(tmp_path):
    assert reverb_checkpoint(tmp_path / "missing") is None
    folder = fake_reverb_checkpoint(tmp_path)
    (folder / "DONE").unlink()
    assert reverb_checkpoint(tmp_path) is None


def test_the_real_reverb_fixture_is_refused(tmp_path):
    import shutil
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "reverb_checkpoint_v0.14" / "checkpoint"
    shutil.copytree(fixture, tmp_path / "ck")
    with pytest.raises(CheckpointError, match="holds a Reverb checkpoint"):
        rc.ReplayBufferManager(spec(), 100, tmp_path / "ck").create_or_load_replay_buffer()
