"""Inputs that used to raise raw exceptions or store surprising dtypes (issue #14, items 15, 16)."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import DTypeError, SpecError

SPEC = {"obs": rc.ArraySpec((2,), np.float32), "done": rc.ArraySpec((), np.bool_)}


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.dtype("uint8"), "float32", bool])
def test_a_dtype_given_instead_of_a_spec_says_so(dtype):
    name = np.dtype(dtype).name
    with pytest.raises(
        SpecError,
        match=rf"data_spec leaf 'obs': got the dtype {name} instead of a spec.*"
        rf"ArraySpec\(\(\), np\.{name}\) for a scalar",
    ):
        rc.ReplayBuffer({"obs": dtype, "done": rc.ArraySpec((), bool)}, 100)


def test_a_dtype_as_the_whole_spec_says_so():
    with pytest.raises(SpecError, match=r"leaf '<root>': got the dtype float32 instead of a spec"):
        rc.ReplayBuffer(np.float32, 100)


def test_a_torch_dtype_instead_of_a_spec_says_so():
    torch = pytest.importorskip("torch")
    with pytest.raises(SpecError, match=r"got the dtype torch\.float32 instead of a spec"):
        rc.ReplayBuffer({"obs": torch.float32}, 100)


class TestBfloat16Tensors:
    match = (
        r"leaf 'obs': got a Tensor of dtype torch\.bfloat16, which has no numpy equivalent\. "
        r"Convert it first, e.g\. tensor\.float\(\)"
    )

    @pytest.fixture(autouse=True)
    def _torch(self):
        self.torch = pytest.importorskip("torch")

    def bf16(self, *shape):
        return self.torch.zeros(*shape, dtype=self.torch.bfloat16)

    def test_add(self):
        buf = rc.ReplayBuffer(SPEC, 8)
        with pytest.raises(DTypeError, match=self.match):
            buf.add({"obs": self.bf16(2), "done": False})
        assert buf.num_frames() == 0

    def test_add_batch(self):
        buf = rc.ReplayBuffer(SPEC, 8, num_envs=2)
        with pytest.raises(DTypeError, match=self.match):
            buf.add_batch({"obs": self.bf16(2, 2), "done": np.zeros(2, bool)})

    def test_observer(self):
        _, observer = rc.ReplayBufferManager(SPEC, 8).create_replay_buffer()
        with pytest.raises(DTypeError, match=self.match):
            observer({"obs": self.bf16(2), "done": self.torch.tensor(False)})

    def test_converted_tensors_are_stored(self):
        _, observer = rc.ReplayBufferManager(SPEC, 8).create_replay_buffer()
        observer({"obs": self.bf16(2).float(), "done": self.torch.tensor(False)})
        assert observer.num_steps == 1


def test_spec_from_example_python_scalars():
    spec = rc.spec_from_example(
        {"reward": 1.5, "action": 3, "done": True, "obs": np.zeros(2, np.float64)}
    )
    assert spec["reward"] == rc.ArraySpec((), np.float32)  # Python float -> float32
    assert spec["action"] == rc.ArraySpec((), np.int64)  # Python int -> int64
    assert spec["done"] == rc.ArraySpec((), np.bool_)  # Python bool -> bool
    assert spec["obs"] == rc.ArraySpec((2,), np.float64)  # arrays keep their dtype
    assert rc.spec_from_example({"x": np.float64(1.0)})["x"].dtype == np.float64  # numpy scalar


def test_transition_buffer_stores_a_python_float_reward_as_float32():
    buf = rc.TransitionBuffer(capacity=10, rng=0)
    buf.add(np.zeros(3, np.float32), 1, 0.5, np.ones(3, np.float32), False, False)
    assert buf.sample(2).reward.dtype == np.float32
