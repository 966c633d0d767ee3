"""Specs: ArraySpec, nests and leaf paths, spec_from_example, spec_from_space, foreign specs."""

from __future__ import annotations

import collections

import numpy as np
import optree
import pytest

import recollect as rc
from recollect.errors import SpecError
from recollect.specs import FlatSpec, normalize_spec

Pose = collections.namedtuple("Pose", ["position", "angle"])

NESTED_SPEC = {
    "observation": {
        "camera": rc.ArraySpec((3, 2), np.uint8),
        "pose": Pose(rc.ArraySpec((2,), np.float16), rc.ArraySpec((), np.float32)),
        "flags": [rc.ArraySpec((), np.bool_), rc.ArraySpec((1,), np.int32)],
    },
    "action": (rc.ArraySpec((), np.int32), rc.ArraySpec((2,), np.float32)),
    "is_last": rc.ArraySpec((), np.bool_),
}
NESTED_PATHS = [
    "action/0",
    "action/1",
    "is_last",
    "observation/camera",
    "observation/flags/0",
    "observation/flags/1",
    "observation/pose/position",
    "observation/pose/angle",
]


class FakeTensorShape:
    """Like tf.TensorShape: dims via as_list(), may hold None."""

    def __init__(self, dims):
        self._dims = list(dims)

    def as_list(self):
        return list(self._dims)


class FakeDType:
    """Like tf.DType: the numpy type via as_numpy_dtype."""

    def __init__(self, np_type):
        self.as_numpy_dtype = np_type


class FakeTensorSpec:
    """Like tf.TensorSpec, without importing tensorflow."""

    def __init__(self, shape, dtype, name=None):
        self.shape = FakeTensorShape(shape)
        self.dtype = FakeDType(dtype)
        self.name = name


def zeros_like_spec(spec, lead=()):
    return optree.tree_map(lambda s: np.zeros(lead + s.shape, s.dtype), normalize_spec(spec))


def test_array_spec_normalises_shape_and_dtype():
    s = rc.ArraySpec([84, np.int64(84)], "uint8", name="pixels")
    assert s.shape == (84, 84) and s.dtype == np.dtype(np.uint8) and s.name == "pixels"
    assert s.nbytes == 84 * 84
    assert rc.ArraySpec((), np.float16).nbytes == 2
    assert rc.ArraySpec((2, 3), bool) == rc.ArraySpec((2, 3), np.bool_)
    with pytest.raises(SpecError, match="sequence of ints"):
        rc.ArraySpec((None, 3), np.float32)


def test_nested_spec_paths_and_unflatten():
    flat = FlatSpec(NESTED_SPEC)
    assert flat.paths == NESTED_PATHS
    assert flat.shapes[flat.index("observation/camera")] == (3, 2)
    assert flat.dtypes[flat.index("observation/pose/position")] == np.float16
    assert flat.has_top_level("is_last") and not flat.has_top_level("camera")
    rebuilt = flat.unflatten(flat.leaves)
    assert isinstance(rebuilt["observation"]["pose"], Pose)
    assert isinstance(rebuilt["observation"]["flags"], list)
    assert isinstance(rebuilt["action"], tuple)
    assert flat.nbytes == 4 + 8 + 1 + 6 + 1 + 4 + 4 + 4
    with pytest.raises(SpecError, match=r"no leaf 'observation/depth'.*observation/camera"):
        flat.index("observation/depth")


def test_buffer_round_trips_every_nest_type():
    buf = rc.ReplayBuffer(NESTED_SPEC, capacity=6, num_envs=2, rng=0)
    for t in range(4):
        step = optree.tree_map(
            lambda x, t=t: (x + t).astype(x.dtype), zeros_like_spec(NESTED_SPEC, (2,))
        )
        step["is_last"] = np.array([t == 1, False])
        buf.add_batch(step)
    s = buf.sample(5, num_steps=2)
    assert isinstance(s.data["observation"]["pose"], Pose)
    assert isinstance(s.data["observation"]["flags"], list)
    assert s.data["observation"]["camera"].shape == (5, 2, 3, 2)
    assert s.data["observation"]["pose"].position.dtype == np.float16
    assert s.data["action"][1].shape == (5, 2, 2)
    times = s.data["observation"]["camera"][:, :, 0, 0]
    np.testing.assert_array_equal(times[:, 1], times[:, 0] + 1)
    assert optree.tree_structure(buf.gather_all()) == optree.tree_structure(
        zeros_like_spec(NESTED_SPEC)
    )


@pytest.mark.parametrize(
    "spec",
    [
        rc.ArraySpec((3,), np.float32),  # a bare leaf as the whole spec
        (rc.ArraySpec((), np.int32), rc.ArraySpec((2,), np.uint8)),
        [rc.ArraySpec((), np.float16), {"x": rc.ArraySpec((), bool)}],
        Pose(rc.ArraySpec((2,), np.float32), rc.ArraySpec((), np.int32)),
    ],
)
def test_top_level_nest_types(spec):
    buf = rc.ReplayBuffer(spec, capacity=4, rng=0)
    buf.add(zeros_like_spec(spec))
    got = buf.sample(3).data
    assert optree.tree_structure(got) == optree.tree_structure(zeros_like_spec(spec))


def test_spec_from_example_mixed_dtypes():
    step = {
        "observation": {"camera": np.zeros((4, 4, 3), np.uint8), "state": np.zeros(5, np.float16)},
        "action": np.int32(1),
        "reward": 1.0,
        "count": 3,
        "done": True,
        "pair": (np.zeros(2, np.float32), [np.zeros((), np.int64)]),
    }
    spec = rc.spec_from_example(step)
    assert spec["observation"]["camera"] == rc.ArraySpec((4, 4, 3), np.uint8)
    assert spec["observation"]["state"] == rc.ArraySpec((5,), np.float16)
    assert spec["action"] == rc.ArraySpec((), np.int32)
    assert spec["reward"] == rc.ArraySpec((), np.float32)  # Python float -> float32 (#14)
    assert spec["count"] == rc.ArraySpec((), np.int64)
    assert spec["done"] == rc.ArraySpec((), np.bool_)
    assert spec["pair"][1][0] == rc.ArraySpec((), np.int64)
    buf = rc.ReplayBuffer(spec, capacity=2)
    buf.add(step)
    assert buf.gather_all()["observation"]["camera"].shape == (1, 1, 4, 4, 3)
    with pytest.raises(SpecError, match="no leaves"):
        rc.spec_from_example({})


def test_spec_from_space_all_supported_spaces():
    spaces = pytest.importorskip("gymnasium").spaces
    space = spaces.Dict(
        {
            "image": spaces.Box(0, 255, (4, 4, 3), np.uint8),
            "state": spaces.Box(-1.0, 1.0, (3,), np.float32),
            "half": spaces.Box(-1.0, 1.0, (2,), np.float16),
            "choice": spaces.Discrete(5),
            "choice32": spaces.Discrete(5, dtype=np.int32),
            "multi": spaces.MultiDiscrete([3, 4, 5]),
            "grid": spaces.MultiDiscrete([[2, 3], [4, 5]]),
            "bits": spaces.MultiBinary(6),
            "bits2d": spaces.MultiBinary([2, 3]),
            "pair": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, (), np.float64))),
        }
    )
    spec = rc.spec_from_space(space)
    assert spec["image"] == rc.ArraySpec((4, 4, 3), np.uint8)
    assert spec["state"] == rc.ArraySpec((3,), np.float32)
    assert spec["half"] == rc.ArraySpec((2,), np.float16)
    assert spec["choice"] == rc.ArraySpec((), np.int64)
    assert spec["choice32"] == rc.ArraySpec((), np.int32)
    assert spec["multi"] == rc.ArraySpec((3,), np.int64)
    assert spec["grid"] == rc.ArraySpec((2, 2), np.int64)
    assert spec["bits"] == rc.ArraySpec((6,), np.int8)
    assert spec["bits2d"] == rc.ArraySpec((2, 3), np.int8)
    assert isinstance(spec["pair"], tuple) and spec["pair"][1] == rc.ArraySpec((), np.float64)
    # Samples of the space fit the spec exactly.
    buf = rc.ReplayBuffer(spec, capacity=4, rng=0)
    space.seed(0)
    for _ in range(3):
        buf.add(space.sample())
    assert buf.num_frames() == 3


def test_spec_from_space_unsupported():
    spaces = pytest.importorskip("gymnasium").spaces
    with pytest.raises(SpecError, match=r"does not support Text.*Box"):
        rc.spec_from_space(spaces.Text(5))


def test_tensor_spec_like_leaves_are_accepted_without_their_framework():
    spec = {
        "observation": FakeTensorSpec([2, 3], np.float32, name="obs"),
        "action": FakeTensorSpec([], np.int32),
        "mask": FakeTensorSpec([4], np.bool_),
        "pixels": np.zeros((2, 2), np.uint8),  # an array is spec-like too
    }
    flat = FlatSpec(spec)
    assert flat.leaves[flat.index("observation")] == rc.ArraySpec((2, 3), np.float32, "obs")
    assert flat.leaves[flat.index("action")] == rc.ArraySpec((), np.int32)
    assert flat.leaves[flat.index("pixels")] == rc.ArraySpec((2, 2), np.uint8)
    buf = rc.ReplayBuffer(spec, capacity=2)
    buf.add(zeros_like_spec(spec))
    assert buf.data_spec["mask"] == rc.ArraySpec((4,), np.bool_)


class UnknownRankShape:
    """Like tf.TensorShape(None): as_list() is not defined."""

    def as_list(self):
        raise ValueError("as_list() is not defined on an unknown TensorShape.")


def test_undefined_dimension_is_rejected_with_path():
    with pytest.raises(SpecError, match=r"leaf 'observation'.*undefined dimension \(None, 3\)"):
        rc.ReplayBuffer({"observation": FakeTensorSpec([None, 3], np.float32)}, capacity=2)
    unknown_rank = FakeTensorSpec([], np.float32)
    unknown_rank.shape = UnknownRankShape()
    with pytest.raises(SpecError, match=r"leaf 'x'.*unknown rank"):
        rc.ReplayBuffer({"x": unknown_rank}, capacity=2)


def test_real_tf_tensor_spec():
    tf = pytest.importorskip("tensorflow")
    spec = {
        "observation": tf.TensorSpec([3], tf.float16, name="obs"),
        "action": tf.TensorSpec([], tf.int32),
        "done": tf.TensorSpec([], tf.bool),
    }
    flat = FlatSpec(spec)
    assert flat.leaves[flat.index("observation")] == rc.ArraySpec((3,), np.float16, "obs")
    assert flat.dtypes == [np.dtype(np.int32), np.dtype(np.bool_), np.dtype(np.float16)]
    with pytest.raises(SpecError, match="undefined dimension"):
        FlatSpec({"x": tf.TensorSpec([None], tf.float32)})
    with pytest.raises(SpecError, match="unknown rank"):
        FlatSpec({"x": tf.TensorSpec(None, tf.float32)})
