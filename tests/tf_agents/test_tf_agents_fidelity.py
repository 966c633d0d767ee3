"""recollect.tf_agents behaves as TF-Agents' TFUniformReplayBuffer documents and tests it.

gather_all for any spec nest, the single deterministic pass (row by row, oldest
first, TF-Agents' windowing), the dataset constructor arguments, ``capacity``
as an int64 tensor and the empty-buffer error class. Written from TF-Agents'
source and docs (tf_uniform_replay_buffer.py); no TF-Agents code.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from recollect import errors  # noqa: E402
from recollect.tf_agents import EmptyBufferError, TFUniformReplayBuffer  # noqa: E402


def _filled(spec, batch_size, max_length, adds, value=lambda row, t: 10 * row + t, **kwargs):
    """A buffer where row r's step t holds ``value(r, t)`` in every leaf."""
    rb = TFUniformReplayBuffer(spec, batch_size, max_length, **kwargs)
    for t in range(adds):
        column = tf.constant([value(r, t) for r in range(batch_size)], tf.int64)
        rb.add_batch(tf.nest.map_structure(lambda s, c=column: _leaf(c, s, batch_size), spec))
    return rb


def _leaf(column, spec, batch_size):
    shaped = tf.reshape(column, [batch_size] + [1] * len(spec.shape))
    return tf.cast(tf.broadcast_to(shaped, [batch_size, *spec.shape]), spec.dtype)


# -- item 2: gather_all for every nest shape -----------------------------------
SPECS = {
    "bare": tf.TensorSpec([], tf.int64),
    "one_tuple": (tf.TensorSpec([], tf.int64),),
    "dict": {"a": tf.TensorSpec([], tf.int64), "b": tf.TensorSpec([2], tf.float32)},
}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("adds", [0, 1, 3, 6])
def test_gather_all_returns_every_stored_step_for_any_nest(name, adds):
    spec = SPECS[name]
    rb = _filled(spec, batch_size=2, max_length=4, adds=adds)
    out = rb.gather_all()
    tf.nest.assert_same_structure(out, spec)
    kept = list(range(max(0, adds - 4), adds))  # the ring keeps the last max_length steps
    for leaf, leaf_spec in zip(tf.nest.flatten(out), tf.nest.flatten(spec), strict=True):
        assert leaf.shape == (2, len(kept), *leaf_spec.shape)
        first = leaf.numpy().reshape(2, len(kept), -1)[..., 0] if kept else np.zeros((2, 0))
        np.testing.assert_array_equal(first, [[10 * r + t for t in kept] for r in range(2)])


def test_gather_all_of_a_bare_spec_from_the_issue():
    rb = TFUniformReplayBuffer(tf.TensorSpec([], tf.int64), 2, 4)
    rb.add_batch(tf.constant([1, 2], tf.int64))
    np.testing.assert_array_equal(rb.gather_all().numpy(), [[1], [2]])
    np.testing.assert_array_equal(tf.function(rb.gather_all)().numpy(), [[1], [2]])


# -- item 4: single deterministic pass ------------------------------------------
def _pass(rb, **kwargs):
    return [
        (items.numpy().tolist(), info)
        for items, info in rb.as_dataset(single_deterministic_pass=True, **kwargs)
    ]


def test_deterministic_pass_goes_row_by_row_oldest_first():
    rb = _filled(tf.TensorSpec([], tf.int64), 2, 4, adds=4)  # rows [0..3] and [10..13]
    assert [x for x, _ in _pass(rb)] == [0, 1, 2, 3, 10, 11, 12, 13]
    assert [x for x, _ in _pass(rb, num_steps=2)] == [[0, 1], [2, 3], [10, 11], [12, 13]]
    _, info = _pass(rb, num_steps=2)[0]
    assert info.probabilities == ()  # as TF-Agents: no probabilities in a deterministic pass


def _reference_pass(rows, batch, steps, drop_remainder, shift):
    """TF-Agents' deterministic pass over per-row value lists, written out with loops."""
    out = []
    if batch is None:
        for values in rows:
            if steps is None:
                out += values
                continue
            for start in range(0, len(values), shift or steps):
                window = values[start : start + steps]
                if len(window) == steps or not drop_remainder:
                    out.append(window)
        return out
    groups = [rows[k : k + batch] for k in range(0, len(rows), batch)]
    for group in groups:
        if drop_remainder and len(group) < batch:
            continue
        length = len(group[0])
        if steps is None:
            out += [[values[t] for values in group] for t in range(length)]
            continue
        for start in range(0, length, shift or steps):
            if start + steps <= length:
                out.append([values[start : start + steps] for values in group])
    return out


@settings(max_examples=25, deadline=None)
@given(
    batch_size=st.integers(1, 4),
    max_length=st.integers(1, 5),
    adds=st.integers(1, 8),
    sample_batch_size=st.one_of(st.none(), st.integers(1, 5)),
    num_steps=st.one_of(st.none(), st.integers(1, 4)),
    drop_remainder=st.booleans(),
    shift=st.one_of(st.none(), st.integers(1, 3)),
)
def test_deterministic_pass_matches_tf_agents_windowing(
    batch_size, max_length, adds, sample_batch_size, num_steps, drop_remainder, shift
):
    too_big = (sample_batch_size or 0) > batch_size or (num_steps or 0) > max_length
    rb = _filled(
        tf.TensorSpec([], tf.int64),
        batch_size,
        max_length,
        adds,
        dataset_drop_remainder=drop_remainder,
        dataset_window_shift=shift,
    )
    kwargs = {"sample_batch_size": sample_batch_size, "num_steps": num_steps}
    if drop_remainder and too_big:
        with pytest.raises(ValueError, match="ALL data will be dropped"):
            rb.as_dataset(single_deterministic_pass=True, **kwargs)
        return
    kept = range(max(0, adds - max_length), adds)
    rows = [[10 * r + t for t in kept] for r in range(batch_size)]
    expected = _reference_pass(rows, sample_batch_size, num_steps, drop_remainder, shift)
    assert [x for x, _ in _pass(rb, **kwargs)] == expected


def test_deterministic_pass_shapes_are_static_with_drop_remainder():
    rb = _filled(tf.TensorSpec([], tf.int64), 4, 6, adds=6, dataset_drop_remainder=True)
    spec, _ = rb.as_dataset(3, 2, single_deterministic_pass=True).element_spec
    assert spec.shape == (3, 2)
    spec, _ = rb.as_dataset(None, 4, single_deterministic_pass=True).element_spec
    assert spec.shape == (4,)
    loose = _filled(tf.TensorSpec([], tf.int64), 4, 6, adds=6)
    assert loose.as_dataset(3, 2, single_deterministic_pass=True).element_spec[0].shape == (
        None,
        2,
    )


# -- item 5: constructor arguments ----------------------------------------------
def test_constructor_accepts_tf_agents_dataset_arguments_by_position_and_name():
    spec = tf.TensorSpec([], tf.int64)
    rb = TFUniformReplayBuffer(spec, 2, 4, "scope", "cpu:*", None, True, 1, True)
    assert rb.scope == "scope"
    rb = TFUniformReplayBuffer(
        spec, 2, 4, dataset_drop_remainder=False, dataset_window_shift=2, stateful_dataset=True
    )
    rb.add_batch(tf.constant([0, 1], tf.int64))
    assert [x for x, _ in _pass(rb)] == [0, 1]


def test_drop_remainder_raises_tf_agents_value_error_from_as_dataset():
    rb = TFUniformReplayBuffer(tf.TensorSpec([], tf.int64), 2, 4, dataset_drop_remainder=True)
    with pytest.raises(ValueError, match=r"sample_batch_size \(3\) > batch_size \(2\).*ALL data"):
        rb.as_dataset(3, single_deterministic_pass=True)
    with pytest.raises(ValueError, match=r"num_steps \(5\) > max_length \(4\).*ALL data"):
        rb.as_dataset(None, 5, single_deterministic_pass=True)
    rb.as_dataset(3)  # sampling mode: not concerned


def test_table_fn_other_than_none_is_refused():
    with pytest.raises(errors.InvalidArgumentError, match=r"table_fn=.*leave table_fn=None"):
        TFUniformReplayBuffer(tf.TensorSpec([], tf.int64), 2, 4, table_fn=object())


# -- item 7: capacity -------------------------------------------------------------
def test_capacity_is_an_int64_scalar_tensor_and_num_frames_a_tensor():
    rb = TFUniformReplayBuffer(tf.TensorSpec([], tf.int64), 3, 5)
    assert isinstance(rb.capacity, tf.Tensor)
    assert rb.capacity.dtype == tf.int64 and rb.capacity.shape == ()
    assert rb.capacity.numpy() == 15
    rb.add_batch(tf.constant([1, 2, 3], tf.int64))
    frames = rb.num_frames()
    assert isinstance(frames, tf.Tensor) and frames.dtype == tf.int64
    assert frames.numpy() == 3


# -- item 8: empty buffer -----------------------------------------------------------
def _empty():
    return TFUniformReplayBuffer({"x": tf.TensorSpec([], tf.int64)}, 2, 4)


@pytest.mark.parametrize(
    "read",
    [
        lambda rb: rb.get_next(),
        lambda rb: rb.get_next(4, 2),
        lambda rb: tf.function(lambda: rb.get_next(4))(),
        lambda rb: next(iter(rb.as_dataset(4))),
        lambda rb: next(iter(rb.as_dataset(4).map(lambda items, info: items))),
        lambda rb: next(iter(rb.as_dataset(4, num_parallel_calls=2))),
        lambda rb: next(iter(rb.as_dataset(single_deterministic_pass=True))),
    ],
    ids=["get_next", "get_next_steps", "tf_function", "dataset", "map", "parallel", "pass"],
)
def test_reading_an_empty_buffer_raises_invalid_argument_error(read):
    with pytest.raises(tf.errors.InvalidArgumentError, match="empty"):
        read(_empty())


def test_empty_error_is_also_not_enough_data_and_says_what_to_do():
    with pytest.raises(EmptyBufferError, match="add steps first") as caught:
        _empty().get_next()
    assert isinstance(caught.value, errors.NotEnoughDataError)
