"""A buffer of 100 leaves saves twice to one path, locally and as a service checkpoint
(issue 23, item 11: a checkpoint is recognised by its structure, not by finding the
format name in the manifest's first 4,096 bytes, which 14 leaves already pass)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError
from recollect.service import Server

NUM_LEAVES = 100
SPEC = {
    "observation": {f"sensor_{i:03d}": rc.ArraySpec((2,), np.float32) for i in range(NUM_LEAVES)},
}


def steps(value: float, num_envs: int) -> dict:
    return {
        "observation": {
            name: np.full((num_envs, 2), value + i, np.float32)
            for i, name in enumerate(SPEC["observation"])
        }
    }


def assert_same(a: rc.ReplayBuffer, b: rc.ReplayBuffer) -> None:
    assert len(a) == len(b)
    for row in range(a.num_envs):
        x, y = a.reader.gather_row(row), b.reader.gather_row(row)
        for name in SPEC["observation"]:
            np.testing.assert_array_equal(x["observation"][name], y["observation"][name])


def test_a_100_leaf_buffer_saves_twice_and_loads(tmp_path):
    buf = rc.ReplayBuffer(SPEC, 64, 2)
    for k in range(5):
        buf.add_batch(steps(k, 2))
    path = tmp_path / "replay"
    buf.save(path)
    manifest = (path / "manifest.json").read_bytes()
    assert manifest.index(b'"format": "recollect-checkpoint"') > 4096  # past the old window
    buf.add_batch(steps(5, 2))
    buf.save(path)
    buf.save(path)
    assert_same(rc.ReplayBuffer.load(path), buf)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay"]


def test_a_checkpoint_of_an_earlier_recollect_without_a_marker_is_replaced(tmp_path):
    buf = rc.ReplayBuffer(SPEC, 64, 2)
    buf.add_batch(steps(0, 2))
    path = tmp_path / "replay"
    buf.save(path)
    (path / ".recollect-save").unlink()  # as saved before markers existed
    buf.add_batch(steps(1, 2))
    buf.save(path)
    assert len(rc.ReplayBuffer.load(path)) == 4


def test_a_foreign_directory_is_still_refused(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": "something-else", "x": 1}))
    buf = rc.ReplayBuffer(SPEC, 64, 2)
    with pytest.raises(CheckpointError, match="not a recollect checkpoint; refusing"):
        buf.save(path)
    (path / "manifest.json").write_text("recollect-checkpoint, but not JSON")
    with pytest.raises(CheckpointError, match="not a recollect checkpoint; refusing"):
        buf.save(path)


def test_a_100_leaf_service_checkpoints_twice_and_restores(tmp_path):
    with Server({"t": rc.ReplayBuffer(SPEC, 64, 2)}, checkpoint_dir=tmp_path) as server:
        client = server.client()
        with client.writer("t", 2) as writer:
            for k in range(5):
                writer.add_batch(steps(k, 2))
        client.checkpoint()
        with client.writer("t", 2) as writer:
            writer.add_batch(steps(5, 2))
        client.checkpoint()
        client.checkpoint()
        expected = server.shards["t"][0].buffer
        with Server({"t": rc.ReplayBuffer(SPEC, 64, 2)}, checkpoint_dir=tmp_path) as again:
            info = again.client().info("t")
            assert (info.num_stored, info.lost_steps) == (12, 0)
            assert_same(again.shards["t"][0].buffer, expected)
