"""``recollect.reverb.TimestepDataset`` (deprecated in Reverb) behaves as dm-reverb 0.14.0's.

The expected values were read from dm-reverb 0.14.0 (the baseline venv) running the same
scenario: three items of 3 steps in a FIFO table; ``max_samples=2`` gives 6 elements
``a = 0, 1, 2, 0, 1, 2`` (FIFO draws the first item twice) with scalar infos
(``probability`` 1.0, ``table_size`` 3, one key per item); ``.batch(3)`` gives the item;
shapes with the time axis, or ``from_table_signature`` of a trajectory signature, fail
when iterated with ``tf.errors.InvalidArgumentError`` ("incompatible tensor at flattened
index 0"). Not matched: dm-reverb refuses step shapes on a table WITH a signature (its
shapes have the time axis) when the iterator is made; we serve them.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import recollect.reverb as reverb  # noqa: E402

DTYPES = {"obs": tf.float32, "a": tf.int64}
STEP_SHAPES = {"obs": tf.TensorShape([2]), "a": tf.TensorShape([])}


@pytest.fixture
def server():
    """Tables ``t`` (no signature) and ``s`` (a signature of 3-step items), the same items."""
    signature = {"obs": tf.TensorSpec([3, 2], tf.float32), "a": tf.TensorSpec([3], tf.int64)}
    tables = [
        reverb.Table(
            name,
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
            signature=sig,
        )
        for name, sig in (("t", None), ("s", signature))
    ]
    server = reverb.Server(tables)  # no `with`: dm-reverb's Server is no context manager
    try:
        with reverb.Client(f"localhost:{server.port}").trajectory_writer(3) as writer:
            for i in range(9):
                writer.append({"obs": np.full(2, i, np.float32), "a": np.int64(i)})
                if i % 3 == 2:
                    items = {"obs": writer.history["obs"][-3:], "a": writer.history["a"][-3:]}
                    writer.create_item("t", 1.0, items)
                    writer.create_item("s", 1.0, items)
        yield server
    finally:
        server.stop()


def dataset(server, shapes=STEP_SHAPES, max_samples: int = 2) -> tf.data.Dataset:
    return reverb.TimestepDataset(
        f"localhost:{server.port}",
        "t",
        dtypes=DTYPES,
        shapes=shapes,
        max_in_flight_samples_per_worker=1,
        max_samples=max_samples,
    )


def test_elements_are_the_steps_of_sampled_items_with_the_items_scalar_info(server):
    data = dataset(server)
    info = data.element_spec.info
    assert [(s.dtype, s.shape) for s in info] == [
        (tf.uint64, ()),
        (tf.float64, ()),
        (tf.int64, ()),
        (tf.float64, ()),
        (tf.int32, ()),
    ]
    assert data.element_spec.data == {
        "obs": tf.TensorSpec([2], tf.float32),
        "a": tf.TensorSpec([], tf.int64),
    }
    elements = list(data)  # max_samples counts items: 2 items of 3 steps
    assert [int(e.data["a"]) for e in elements] == [0, 1, 2, 0, 1, 2]
    np.testing.assert_array_equal(elements[1].data["obs"].numpy(), [1.0, 1.0])
    assert {(float(e.info.probability), int(e.info.table_size)) for e in elements} == {(1.0, 3)}
    keys = [int(e.info.key) for e in elements]
    assert keys[:3] == [keys[0]] * 3 and keys[3:] == [keys[3]] * 3


def test_batch_of_the_item_length_gives_back_the_items(server):
    item = next(iter(dataset(server, max_samples=1).batch(3)))
    np.testing.assert_array_equal(item.data["a"].numpy(), [0, 1, 2])
    assert item.data["obs"].shape == (3, 2) and item.info.key.shape == (3,)


def test_shapes_with_the_time_axis_fail_when_iterated(server):
    with_time = {"obs": tf.TensorShape([3, 2]), "a": tf.TensorShape([3])}
    with pytest.raises(tf.errors.InvalidArgumentError, match="incompatible tensor at flattened"):
        list(dataset(server, with_time, max_samples=1))


def test_from_table_signature_takes_the_item_signature_as_dm_reverb_does(server):
    data = reverb.TimestepDataset.from_table_signature(
        f"localhost:{server.port}", "s", max_in_flight_samples_per_worker=1, max_samples=1
    )
    assert data.element_spec.data == {
        "obs": tf.TensorSpec([3, 2], tf.float32),
        "a": tf.TensorSpec([3], tf.int64),
    }
    with pytest.raises(tf.errors.InvalidArgumentError, match="incompatible tensor at flattened"):
        list(data)
