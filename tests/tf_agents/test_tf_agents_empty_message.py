"""An empty TFUniformReplayBuffer raises tf.errors.InvalidArgumentError with TF-Agents' own
text (TF-Agents' tests match it), followed by recollect's hint."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from recollect.tf_agents import EmptyBufferError, TFUniformReplayBuffer  # noqa: E402

SAMPLING = r"TFUniformReplayBuffer is empty\. Make sure to add items before sampling the buffer\."
HINT = r" \(cannot sample from an empty buffer; add steps first"
SPEC = {"x": tf.TensorSpec((2,), tf.float32), "n": tf.TensorSpec((), tf.int32)}


def _buffer():
    return TFUniformReplayBuffer(SPEC, batch_size=1, max_length=10)


@pytest.mark.parametrize("args", [(), (4,), (4, 2), (None, 2)])
def test_get_next_on_an_empty_buffer_raises_tf_agents_text_then_our_hint(args):
    with pytest.raises(tf.errors.InvalidArgumentError, match=SAMPLING + HINT) as info:
        _buffer().get_next(*args)
    assert isinstance(info.value, EmptyBufferError)


def test_get_next_inside_tf_function_raises_tf_agents_text():
    buffer = _buffer()

    @tf.function
    def sample():
        return buffer.get_next(4)[0]

    with pytest.raises(tf.errors.InvalidArgumentError, match=SAMPLING + HINT):
        sample()


def test_too_few_steps_for_num_steps_is_empty_as_in_tf_agents():
    buffer = _buffer()
    buffer.add_batch({"x": np.zeros((1, 2), np.float32), "n": np.zeros(1, np.int32)})
    with pytest.raises(tf.errors.InvalidArgumentError, match=SAMPLING + r" \(") as info:
        buffer.get_next(4, 3)
    assert "TFUniformReplayBuffer is empty" in str(info.value)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_as_dataset_on_an_empty_buffer_raises_tf_agents_text(graph):
    dataset = _buffer().as_dataset(4, 2)
    if graph:  # a further transformation leaves the eager fast path: tf.data reports it
        dataset = dataset.map(lambda items, info: items)
    with pytest.raises(tf.errors.InvalidArgumentError, match=SAMPLING + HINT):
        next(iter(dataset))


def test_deterministic_pass_on_an_empty_buffer_keeps_tf_agents_text_for_it():
    dataset = _buffer().as_dataset(single_deterministic_pass=True)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"TFUniformReplayBuffer is empty\. Make sure to add items before asking the "
        r"buffer for data",
    ):
        next(iter(dataset))
