"""Messages a new user meets (issue 36, item 3): each names the right owner and the
difference, not a dump."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError, ShapeError
from recollect.service import Server


def test_a_writer_given_too_many_rows_names_its_own_num_envs():
    client = Server({"t": rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, 64, 4)}).client()
    writer = client.writer("t", num_envs=2)
    with pytest.raises(
        ShapeError,
        match=r"the writer's num_envs=2 .* or open the writer with num_envs=4\.$",
    ):
        writer.add_batch({"x": np.zeros(4, np.float32)})
    client.close()


def test_a_buffer_given_too_many_rows_names_its_num_envs():
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, 64, 2)
    with pytest.raises(ShapeError, match=r"the buffer's num_envs=2 .* create the buffer with"):
        buf.add_batch({"x": np.zeros(4, np.float32)})


def test_reopening_a_memmap_directory_with_another_spec_names_the_differing_leaves(tmp_path):
    spec = {
        "obs": rc.ArraySpec((4,), np.float32),
        "act": rc.ArraySpec((), np.int64),
        "is_last": rc.ArraySpec((), bool),
    }
    rc.ReplayBuffer(spec, 8, 2, storage="memmap", directory=tmp_path / "m").close()
    other = {
        "obs": rc.ArraySpec((8,), np.float32),
        "act": rc.ArraySpec((), np.int32),
        "rew": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
    }
    with pytest.raises(CheckpointError) as raised:
        rc.ReplayBuffer(other, 8, 2, storage="memmap", directory=tmp_path / "m")
    message = str(raised.value)
    assert "'act': dtype <i8 saved, <i4 here" in message
    assert "'obs': shape [4] saved, [8] here" in message
    assert "'rew' only here" in message
    assert "is_last" not in message and len(message) < 300, message


def test_as_tensors_of_a_uniform_sample_warns_nothing():
    torch = pytest.importorskip("torch")
    import warnings

    import recollect.adapters.torch as rc_torch

    buf = rc.ReplayBuffer({"x": rc.ArraySpec((3,), np.float32)}, 64, 1, rng=0)
    for t in range(10):
        buf.add({"x": np.full(3, t, np.float32)})
    sample = buf.sample(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tensors = rc_torch.as_tensors(sample)
    assert tensors.probabilities.dtype == torch.float64
    np.testing.assert_array_equal(tensors.data["x"].numpy(), sample.data["x"])


def test_replay_buffer_add_of_a_transition_names_the_transition_buffer():
    from recollect.errors import InvalidArgumentTypeError

    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, 16)
    s = np.zeros(4, np.float32)
    with pytest.raises(
        InvalidArgumentTypeError, match=r"got 5 positional values.*TransitionBuffer"
    ):
        buf.add(s, 0, 1.0, s, False)
    assert len(buf) == 0
    with pytest.raises(TypeError):  # still the TypeError Python would raise
        buf.add(s, 0)


def test_replay_buffer_as_dataset_names_the_adapter():
    from recollect.errors import WrongClassError

    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, 16)
    with pytest.raises(WrongClassError, match=r"recollect\.tf_data\.as_dataset\(buffer"):
        buf.as_dataset(sample_batch_size=32)
    assert not hasattr(buf, "as_dataset")
