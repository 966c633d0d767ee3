"""Recollect errors raised inside tf.data: wrapped by TF, recovered by ``unwrap_error``."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect import ArraySpec, ReplayBuffer, errors  # noqa: E402
from recollect.adapters.tf_data import as_dataset, unwrap_error  # noqa: E402


def empty_buffer() -> ReplayBuffer:
    return ReplayBuffer({"obs": ArraySpec((2,), np.float32)}, 8)


def test_eager_iteration_error_unwraps_to_the_original_recollect_error():
    with pytest.raises(tf.errors.OpError, match="NotEnoughDataError: cannot sample") as info:
        next(iter(as_dataset(empty_buffer(), 4)))
    original = unwrap_error(info.value)
    assert isinstance(original, errors.NotEnoughDataError)
    assert "add steps first" in str(original)


def test_graph_mode_error_is_rebuilt_from_the_message():
    dataset = as_dataset(empty_buffer(), 4)

    @tf.function
    def step():
        return next(iter(dataset))

    with pytest.raises(tf.errors.UnknownError, match="NotEnoughDataError: cannot sample") as info:
        step()
    rebuilt = unwrap_error(info.value)
    assert type(rebuilt) is errors.NotEnoughDataError
    assert str(rebuilt) == (
        "cannot sample from an empty buffer; add steps first (or wait for the collector)."
    )


def test_other_errors_are_returned_unchanged():
    err = tf.errors.UnknownError(None, None, "something else: went wrong")
    assert unwrap_error(err) is err
    plain = ValueError("x")
    assert unwrap_error(plain) is plain
