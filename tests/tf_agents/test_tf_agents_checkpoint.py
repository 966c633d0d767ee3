"""recollect.tf_agents buffers in TensorFlow checkpoints (tf.train.Checkpoint, Checkpointer).

TF-Agents' buffers are ``tf.Module``s whose state a ``tf.train.Checkpoint``
saves; ours are too: data, positions, episode ends and the sampling rng come
back, also in a fresh process, with no pickle.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect import errors  # noqa: E402
from recollect.tf_agents import PyUniformReplayBuffer, TFUniformReplayBuffer  # noqa: E402

SPEC = {"obs": tf.TensorSpec([3], tf.float32), "is_last": tf.TensorSpec([], tf.bool)}


def _tf_buffer(seed=0):
    return TFUniformReplayBuffer(SPEC, 2, 5, rng=seed)


def _fill(rb, steps):
    for t in range(steps):
        rb.add_batch(
            {"obs": tf.fill([2, 3], float(t)), "is_last": tf.constant([t % 3 == 2, False])}
        )


def _state(rb):
    return [x.numpy().tolist() for x in tf.nest.flatten(rb.gather_all())]


def test_tf_buffer_round_trips_through_tf_train_checkpoint(tmp_path):
    rb = _tf_buffer()
    _fill(rb, 7)  # wrapped around: positions matter
    rb.get_next(4, 2)  # the rng moved
    path = tf.train.Checkpoint(replay_buffer=rb).save(str(tmp_path / "ckpt"))
    expected_next = [x.numpy().tolist() for x in tf.nest.flatten(rb.get_next(4, 2)[0])]

    restored = _tf_buffer(seed=123)
    tf.train.Checkpoint(replay_buffer=restored).restore(path).assert_consumed()
    assert _state(restored) == _state(rb)
    assert int(restored.num_frames()) == int(rb.num_frames())
    got_next = [x.numpy().tolist() for x in tf.nest.flatten(restored.get_next(4, 2)[0])]
    assert got_next == expected_next  # same rng state
    # episode ends came back (row 0 ended episodes at t=2 and t=5)
    np.testing.assert_array_equal(
        restored.buffer.table.index.last_end, rb.buffer.table.index.last_end
    )
    assert restored.buffer.table.index.last_end.tolist() == [5, -1]
    _fill(restored, 1)
    assert int(restored.num_frames()) == 10


def test_py_buffer_round_trips_and_a_checkpoint_manager_works(tmp_path):
    spec = {"x": tf.TensorSpec([], tf.int64)}
    rb = PyUniformReplayBuffer(spec, 4, rng=0)
    for t in range(6):
        rb.add_batch({"x": np.array([t])})
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(replay_buffer=rb), str(tmp_path), max_to_keep=1
    )
    manager.save()
    fresh = PyUniformReplayBuffer(spec, 4, rng=5)
    tf.train.Checkpoint(replay_buffer=fresh).restore(manager.latest_checkpoint)
    np.testing.assert_array_equal(fresh.gather_all()["x"], [[2, 3, 4, 5]])
    assert fresh.get_next(8)["x"].tolist() == rb.get_next(8)["x"].tolist()


def test_restore_into_a_buffer_of_another_geometry_raises(tmp_path):
    rb = _tf_buffer()
    _fill(rb, 2)
    path = tf.train.Checkpoint(replay_buffer=rb).save(str(tmp_path / "ckpt"))
    other = TFUniformReplayBuffer(SPEC, 3, 5)
    with pytest.raises(errors.CheckpointError, match="another spec or geometry"):
        tf.train.Checkpoint(replay_buffer=other).restore(path)


@pytest.mark.slow  # ~5 s (a child process importing TensorFlow); CI and --run-slow
def test_checkpoint_restores_in_a_fresh_process(tmp_path):
    rb = _tf_buffer()
    _fill(rb, 6)
    path = tf.train.Checkpoint(replay_buffer=rb).save(str(tmp_path / "ckpt"))
    expected = _state(rb)
    script = textwrap.dedent(
        f"""
        import json, os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        from recollect.tf_agents import TFUniformReplayBuffer
        spec = {{"obs": tf.TensorSpec([3], tf.float32), "is_last": tf.TensorSpec([], tf.bool)}}
        rb = TFUniformReplayBuffer(spec, 2, 5, rng=9)
        tf.train.Checkpoint(replay_buffer=rb).restore({str(path)!r}).assert_consumed()
        print(json.dumps([x.numpy().tolist() for x in tf.nest.flatten(rb.gather_all())]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    import json

    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_checkpoint_holds_no_pickle(tmp_path):
    rb = _tf_buffer()
    _fill(rb, 3)
    path = tf.train.Checkpoint(replay_buffer=rb).save(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(path)
    names = [n for n in reader.get_variable_to_shape_map() if "replay_buffer" in n]
    assert names
    blob = reader.get_tensor(names[0])
    assert blob[:2] == b"PK"  # an .npz archive (numpy arrays and JSON), read without pickle
