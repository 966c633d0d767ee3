"""add_batch's fast path (exact input, ``exact_matcher``) against its slow twin (``convert_step``).

The twin is the full check written out: ``write_leaves(convert_step(...))``. Both must
leave identical buffers for every accepted input, and every rejected input must raise
the same error with the same message and write nothing.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import CastError, DTypeError, ShapeError, SpecError
from recollect.specs import FlatSpec
from recollect.validation import convert_step, exact_matcher

NUM_ENVS = 3
FLAT_SPEC = {
    "action": rc.ArraySpec((2,), np.int32),
    "is_last": rc.ArraySpec((), np.bool_),
    "observation": rc.ArraySpec((2, 3), np.float32),
    "reward": rc.ArraySpec((), np.float16),
    "tag": rc.ArraySpec((), np.uint8),
}
Pair = collections.namedtuple("Pair", ["left", "right"])
NESTED_SPEC = {
    "observation": Pair(rc.ArraySpec((3,), np.float32), rc.ArraySpec((2, 2), np.uint8)),
    "extra": [rc.ArraySpec((), np.int64)],
    "is_last": rc.ArraySpec((), np.bool_),
}
SPECS = {"flat": FLAT_SPEC, "nested": NESTED_SPEC}
GOOD_KINDS = ("exact", "exact", "exact", "strided", "list", "wider", "swapped", "subclass")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Sub(np.ndarray):
    """An ndarray subclass: never taken by the fast path."""


def leaf_value(shape: tuple, dtype: np.dtype, counter: int, kind: str, ends: np.ndarray) -> object:
    """One leaf of an accepted step, ``[NUM_ENVS, *shape]``, in the given kind of container."""
    full = (NUM_ENVS, *shape)
    if dtype == np.bool_:
        exact = ends.copy()
    else:
        exact = ((counter + np.arange(np.prod(full))) % 100).reshape(full).astype(dtype)
    if kind == "strided":  # exact dtype and shape, not contiguous
        doubled = np.repeat(exact, 2, axis=0)
        return doubled[::2]
    if kind == "list" and dtype.kind != "u":  # Python ints become int64: refused for uint
        return exact.tolist()
    if kind == "wider":  # a safe, lossless cast
        wider = {"b": np.bool_, "f": np.float64, "u": np.uint64, "i": np.int64}[dtype.kind]
        return exact.astype(wider)
    if kind == "swapped":  # same values, other byte order
        return exact.astype(exact.dtype.newbyteorder("S"))
    if kind == "subclass":
        return exact.view(Sub)
    return exact


def make_step(spec: object, counter: int, kinds: list[str], ends: np.ndarray) -> object:
    flat = FlatSpec(spec)
    leaves = [
        leaf_value(s, d, counter + 7 * i, kinds[i % len(kinds)], ends)
        for i, (s, d) in enumerate(zip(flat.shapes, flat.dtypes, strict=True))
    ]
    return flat.unflatten(leaves)


def assert_same_state(a: object, b: object, path: str = "") -> None:
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for key in a:
            assert_same_state(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, np.ndarray | np.generic):
        np.testing.assert_array_equal(a, b, err_msg=path)
        assert np.asarray(a).dtype == np.asarray(b).dtype, path
    else:
        assert a == b, path


def twin_buffers(spec: object, prioritized: bool = False) -> tuple[rc.ReplayBuffer, ...]:
    def make() -> rc.ReplayBuffer:
        kwargs = {"sampler": rc.Prioritized(0.6), "sequence_length": 2} if prioritized else {}
        return rc.ReplayBuffer(spec, 4 * NUM_ENVS, NUM_ENVS, rng=3, **kwargs)

    return make(), make()


def slow_add_batch(buf: rc.ReplayBuffer, steps: object) -> None:
    """add_batch through the full check only."""
    buf.writer.write_leaves(convert_step(buf.writer.flat_spec, steps, (NUM_ENVS,), "add_batch"))


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
@SETTINGS
@given(data=st.data())
def test_fast_and_full_check_leave_identical_buffers(spec_name, sampler, data):
    spec = SPECS[spec_name]
    fast, slow = twin_buffers(spec, prioritized=sampler == "prioritized")
    num_leaves = len(FlatSpec(spec).paths)
    steps = data.draw(st.integers(1, 14), label="steps")
    for t in range(steps):
        kinds = data.draw(
            st.lists(st.sampled_from(GOOD_KINDS), min_size=num_leaves, max_size=num_leaves),
            label=f"kinds{t}",
        )
        ends = np.array(data.draw(st.lists(st.booleans(), min_size=NUM_ENVS, max_size=NUM_ENVS)))
        step = make_step(spec, 10 * t, kinds, ends)
        fast.add_batch(step)
        slow_add_batch(slow, step)
    assert_same_state(fast.state_dict(), slow.state_dict())
    if fast.table.can_sample(1, 2):
        a, b = fast.sample(8, 2), slow.sample(8, 2)
        np.testing.assert_array_equal(a.ids, b.ids)
        for x, y in zip(
            FlatSpec(spec).treedef.flatten_up_to(a.data),
            FlatSpec(spec).treedef.flatten_up_to(b.data),
            strict=True,
        ):
            np.testing.assert_array_equal(x, y)


def bad_steps() -> dict[str, tuple[object, type]]:
    """Rejected variants of one good FLAT_SPEC step, with the error each must raise."""
    ends = np.zeros(NUM_ENVS, bool)
    good = make_step(FLAT_SPEC, 0, ["exact"], ends)
    out: dict[str, tuple[object, type]] = {}

    def variant(name: str, error: type, **change: object) -> None:
        step = dict(good)
        for key, value in change.items():
            if value is None:
                del step[key]
            else:
                step[key] = value
        out[name] = (step, error)

    variant("missing leaf", SpecError, tag=None)
    out["extra leaf"] = ({**good, "more": np.zeros(NUM_ENVS)}, SpecError)
    variant("no env dim", ShapeError, observation=good["observation"][0])
    variant("transposed", ShapeError, action=np.zeros((2, NUM_ENVS), np.int32))
    variant("too many envs", ShapeError, reward=np.zeros(NUM_ENVS + 1, np.float16))
    variant("float into int", DTypeError, action=good["action"].astype(np.float32))
    variant("int out of range", CastError, tag=np.full(NUM_ENVS, 300, np.uint16))
    variant("float overflow", CastError, reward=np.full(NUM_ENVS, 1e6, np.float64))
    variant("inexact int to float", CastError, reward=np.full(NUM_ENVS, 2**40 + 1, np.int64))
    variant("None leaf", SpecError, observation=np.array(None))
    variant("ragged list", SpecError, action=[[1, 2], [3]] + [[0, 0]] * (NUM_ENVS - 2))
    variant("bool from int", DTypeError, is_last=np.zeros(NUM_ENVS, np.int8))
    out["tuple not dict"] = (tuple(good.values()), SpecError)
    out["ordered dict"] = (collections.OrderedDict(reversed(list(good.items()))), None)
    return out


@pytest.mark.parametrize("name", sorted(bad_steps()))
def test_rejected_input_raises_the_full_checks_error_and_writes_nothing(name):
    step, error = bad_steps()[name]
    buf = rc.ReplayBuffer(FLAT_SPEC, 4 * NUM_ENVS, NUM_ENVS, rng=0)
    buf.add_batch(make_step(FLAT_SPEC, 0, ["exact"], np.zeros(NUM_ENVS, bool)))
    before = {k: np.array(v) for k, v in buf.state_dict()["storage"]["columns"].items()}
    frames = buf.num_frames()
    if error is None:  # accepted by the full check (another mapping type): same as the twin
        twin = rc.ReplayBuffer(FLAT_SPEC, 4 * NUM_ENVS, NUM_ENVS, rng=0)
        twin.add_batch(make_step(FLAT_SPEC, 0, ["exact"], np.zeros(NUM_ENVS, bool)))
        buf.add_batch(step)
        slow_add_batch(twin, step)
        assert_same_state(buf.state_dict(), twin.state_dict())
        return
    with pytest.raises(error) as slow_err:
        convert_step(buf.writer.flat_spec, step, (NUM_ENVS,), "add_batch")
    with pytest.raises(error) as fast_err:
        buf.add_batch(step)
    assert str(fast_err.value) == str(slow_err.value)
    assert buf.num_frames() == frames
    after = buf.state_dict()["storage"]["columns"]
    for key, column in before.items():
        np.testing.assert_array_equal(after[key], column)


@pytest.mark.parametrize("spec_name", sorted(SPECS))
def test_exact_matcher_returns_convert_steps_leaves_for_exact_input(spec_name):
    spec = SPECS[spec_name]
    flat = FlatSpec(spec)
    step = make_step(spec, 0, ["exact"], np.array([True, False, True]))
    got = exact_matcher(flat, (NUM_ENVS,))(step)
    want = convert_step(flat, step, (NUM_ENVS,), "add_batch")
    assert got is not None
    assert len(got) == len(want)
    assert all(a is b for a, b in zip(got, want, strict=True))  # the same objects, no copies


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("kind", ["strided"])
def test_exact_matcher_takes_strided_arrays_of_exact_dtype_and_shape(spec_name, kind):
    flat = FlatSpec(SPECS[spec_name])
    step = make_step(SPECS[spec_name], 0, [kind], np.zeros(NUM_ENVS, bool))
    assert exact_matcher(flat, (NUM_ENVS,))(step) is not None


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("kind", ["list", "wider", "swapped", "subclass"])
def test_exact_matcher_leaves_anything_inexact_to_the_full_check(spec_name, kind):
    flat = FlatSpec(SPECS[spec_name])
    step = make_step(SPECS[spec_name], 0, [kind], np.zeros(NUM_ENVS, bool))
    assert exact_matcher(flat, (NUM_ENVS,))(step) is None


@pytest.mark.parametrize("name", sorted(bad_steps()))
def test_exact_matcher_never_accepts_rejected_input(name):
    step, _ = bad_steps()[name]
    assert exact_matcher(FlatSpec(FLAT_SPEC), (NUM_ENVS,))(step) is None


def test_exact_matcher_of_a_nested_spec_refuses_another_structure():
    match = exact_matcher(FlatSpec(NESTED_SPEC), (NUM_ENVS,))
    step = make_step(NESTED_SPEC, 0, ["exact"], np.zeros(NUM_ENVS, bool))
    assert match({**step, "observation": tuple(step["observation"])}) is None
    assert match({k: v for k, v in step.items() if k != "extra"}) is None
    assert match([1, 2, 3]) is None


def test_fast_path_records_episode_ends_as_the_full_check():
    fast, slow = twin_buffers(FLAT_SPEC)
    for t, ends in enumerate(([False, True, False], [False] * 3, [True, True, False])):
        step = make_step(FLAT_SPEC, t, ["exact"], np.array(ends))
        fast.add_batch(step)
        slow_add_batch(slow, step)
    assert_same_state(fast.state_dict(), slow.state_dict())
    assert fast.table.index.last_end.tolist() == [2, 2, -1]


def test_fast_path_with_rows_at_different_clocks_takes_the_general_write():
    fast, slow = twin_buffers(FLAT_SPEC)
    one = {k: v[:1] for k, v in make_step(FLAT_SPEC, 0, ["exact"], np.zeros(3, bool)).items()}
    for buf in (fast, slow):
        buf.add_batch(one, rows=[1])
    step = make_step(FLAT_SPEC, 5, ["exact"], np.zeros(NUM_ENVS, bool))
    fast.add_batch(step)
    slow_add_batch(slow, step)
    assert_same_state(fast.state_dict(), slow.state_dict())
    assert fast.reader.steps_per_row().tolist() == [1, 2, 1]
