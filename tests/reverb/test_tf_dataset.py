"""recollect.reverb's TensorFlow side: TrajectoryDataset and TFClient, beside dm-reverb 0.14
(its ``trajectory_dataset.py``/``tf_client.py`` and what it returned, recorded below)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import recollect.reverb as reverb  # noqa: E402

SIGNATURE = {"obs": tf.TensorSpec([2, 3], tf.float32), "act": tf.TensorSpec([2], tf.int64)}

#: element_spec of dm-reverb 0.14.0 (TF 2.15, /work/reverb-venv) for
#: ``TrajectoryDataset.from_table_signature`` on a table of SIGNATURE, as printed there
#: (hard-coded: dm-reverb is not installed in this environment)
REVERB_INFO_SPEC = reverb.SampleInfo(
    key=tf.TensorSpec(shape=(), dtype=tf.uint64),
    probability=tf.TensorSpec(shape=(), dtype=tf.float64),
    table_size=tf.TensorSpec(shape=(), dtype=tf.int64),
    priority=tf.TensorSpec(shape=(), dtype=tf.float64),
    times_sampled=tf.TensorSpec(shape=(), dtype=tf.int32),
)
REVERB_SIGNATURE_SPEC = reverb.ReplaySample(
    info=REVERB_INFO_SPEC,
    data={
        "act": tf.TensorSpec(shape=(2,), dtype=tf.int64),
        "obs": tf.TensorSpec(shape=(2, 3), dtype=tf.float32),
    },
)
#: ... and for ``TrajectoryDataset(dtypes=[int64, float32], shapes=[[2], [2, 3]])``: lists
#: become tuples
REVERB_LIST_SPEC = reverb.ReplaySample(
    info=REVERB_INFO_SPEC,
    data=(tf.TensorSpec(shape=(2,), dtype=tf.int64), tf.TensorSpec(shape=(2, 3), dtype=tf.float32)),
)


def uniform(name: str, signature=None, max_size: int = 100) -> reverb.Table:
    return reverb.Table(
        name,
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
        signature=signature,
    )


def write_steps(client, table: str, steps: int) -> None:
    """Items of 2 consecutive steps: obs rows all equal the step, act = the step."""
    with client.trajectory_writer(2) as writer:
        for i in range(steps):
            writer.append({"obs": np.full(3, i, np.float32), "act": np.int64(i)})
            if i >= 1:
                writer.create_item(
                    table,
                    1.0,
                    {"obs": writer.history["obs"][-2:], "act": writer.history["act"][-2:]},
                )


@pytest.fixture
def server():
    with reverb.Server(
        [uniform("t", SIGNATURE), uniform("nosig"), reverb.Table.queue("q", 100)]
    ) as server:
        yield server


@pytest.fixture
def address(server) -> str:
    return f"localhost:{server.port}"


def sampled(client, table: str) -> int:
    return int(client.server_info()[table].rate_limiter_info.sample_stats.completed)


def test_element_spec_is_dm_reverbs(address):
    by_signature = reverb.TrajectoryDataset.from_table_signature(address, "t", 10)
    assert by_signature.element_spec == REVERB_SIGNATURE_SPEC
    by_lists = reverb.TrajectoryDataset(
        address, "t", [tf.int64, tf.float32], [tf.TensorShape([2]), tf.TensorShape([2, 3])], 3
    )
    assert by_lists.element_spec == REVERB_LIST_SPEC
    assert isinstance(by_signature, tf.data.Dataset)


def test_samples_are_the_items_written(address):
    client = reverb.Client(address)
    write_steps(client, "t", 6)
    dataset = reverb.TrajectoryDataset.from_table_signature(address, "t", 4)
    for sample in dataset.take(20):
        act = sample.data["act"].numpy()
        assert act[1] == act[0] + 1 and 0 <= act[0] <= 4
        np.testing.assert_array_equal(sample.data["obs"].numpy(), np.repeat(act, 3).reshape(2, 3))
        assert sample.info.table_size.numpy() == 5
        assert sample.info.probability.numpy() == pytest.approx(0.2)


@pytest.mark.parametrize("in_flight", [1, 2, 10])
def test_max_samples_ends_the_dataset_without_drawing_more(address, in_flight):
    client = reverb.Client(address)
    write_steps(client, "t", 4)
    before = sampled(client, "t")
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, "t", in_flight, max_samples=3
    ).prefetch(8)
    assert len(list(dataset)) == 3
    assert sampled(client, "t") - before == 3  # no read-ahead beyond max_samples
    assert len(list(dataset)) == 3  # each iterator has its own budget


def test_rate_limiter_timeout_ends_the_dataset(address):
    client = reverb.Client(address)
    for i in range(2):
        client.insert(np.float32(i), {"q": 1.0})
    dataset = reverb.TrajectoryDataset(
        address, "q", tf.float32, tf.TensorShape([1]), 5, rate_limiter_timeout_ms=50
    )
    got = [s.data.numpy().tolist() for s in dataset]
    assert got == [[0.0], [1.0]]  # the queue's items in order, then the end
    iterator = iter(dataset)
    with pytest.raises(StopIteration):
        next(iterator)


def test_graph_mode_initializable_iterator_with_tensor_address(address):
    client = reverb.Client(address)
    write_steps(client, "t", 4)
    with tf.Graph().as_default():
        dataset = reverb.TrajectoryDataset(
            tf.constant(address),
            tf.constant("t"),
            {"act": tf.int64, "obs": tf.float32},
            {"act": tf.TensorShape([2]), "obs": tf.TensorShape([2, 3])},
            2,
            max_samples=3,
        )
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        element = iterator.get_next()
        with tf.compat.v1.Session() as session:
            for _ in range(2):  # re-initialised: a fresh budget each time
                session.run(iterator.initializer)
                acts = [session.run(element).data["act"] for _ in range(3)]
                assert all(a[1] == a[0] + 1 for a in acts)
                with pytest.raises(tf.errors.OutOfRangeError):
                    session.run(element)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"max_in_flight_samples_per_worker": 0},
            r"^max_in_flight_samples_per_worker \(0\) must be a positive integer$",
        ),
        (
            {"num_workers_per_iterator": 0},
            r"^num_workers_per_iterator \(0\) must be a positive integer or -1$",
        ),
        (
            {"max_samples_per_stream": 0},
            r"^max_samples_per_stream \(0\) must be a positive integer or -1$",
        ),
        (
            {"rate_limiter_timeout_ms": -2},
            r"^rate_limiter_timeout_ms \(-2\) must be an integer >= -1$",
        ),
        ({"max_samples": 0}, r"^max_samples \(0\) must be a positive integer or -1$"),
    ],
)
def test_build_time_errors_are_reverbs(address, kwargs, message):
    arguments = {"max_in_flight_samples_per_worker": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        reverb.TrajectoryDataset(address, "t", [tf.float32], [tf.TensorShape([2, 3])], **arguments)


def test_dtypes_and_shapes_must_share_structure(address):
    with pytest.raises(ValueError, match="same nested structure"):
        reverb.TrajectoryDataset(
            address, "t", [tf.float32], [tf.TensorShape([2, 3]), tf.TensorShape([2])], 3
        )


def test_from_table_signature_errors_are_reverbs(address):
    with pytest.raises(
        ValueError,
        match=rf"^Server at {address} does not contain any table named nope\. "
        r"Found: nosig, q, t\.$",
    ):
        reverb.TrajectoryDataset.from_table_signature(address, "nope", 10)
    with pytest.raises(
        ValueError, match=rf"^Table nosig at {address} does not have a signature\.$"
    ):
        reverb.TrajectoryDataset.from_table_signature(address, "nosig", 10)


def test_wrong_dtypes_raise_invalid_argument_at_run_time(address):
    write_steps(reverb.Client(address), "t", 3)
    dataset = reverb.TrajectoryDataset(
        address, "t", [tf.float64, tf.float32], [tf.TensorShape([2]), tf.TensorShape([2, 3])], 3
    )
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Requested incompatible tensor at flattened index 0 from table 't'\.  "
        r"Requested \(dtype, shape\): \(double, \[2\]\)\.  "
        r"Sampled \(dtype, shape\): \(int64, \[2\]\)",
    ):
        next(iter(dataset))


def test_several_workers_sample_the_table(address):
    write_steps(reverb.Client(address), "t", 5)
    dataset = reverb.TrajectoryDataset.from_table_signature(
        address, "t", 4, num_workers_per_iterator=2
    )
    firsts = {int(s.data["act"][0]) for s in dataset.take(200)}
    assert firsts == {0, 1, 2, 3}


# ----------------------------------------------------------------- TFClient


def test_tf_client_ops_in_tf_function(address):
    tf_client = reverb.TFClient(address)

    @tf.function
    def insert_sample_update():
        tf_client.insert(
            [tf.constant([1.0, 2.0]), tf.constant(3, tf.int64)],
            tf.constant(["nosig"]),
            tf.constant([1.0], tf.float64),
        )
        sample = tf_client.sample("nosig", [tf.float32, tf.int64])
        tf_client.update_priorities(
            "nosig", tf.reshape(sample.info.key, [1]), tf.constant([5.0], tf.float64)
        )
        return sample

    sample = insert_sample_update()
    np.testing.assert_array_equal(sample.data[0].numpy(), [1.0, 2.0])
    assert sample.data[1].numpy() == 3 and sample.info.times_sampled.numpy() == 1
    assert sample.info.key.dtype == tf.uint64 and sample.info.key.shape == ()
    (again,) = (next(reverb.Client(address).sample("nosig", emit_timesteps=False)),)
    assert again.info.priority == 5.0 and again.info.key == int(sample.info.key.numpy())


def test_tf_client_ops_run_eagerly(address):
    """Eagerly, TF 2.15's numpy_function passes a string tensor as a 0-d object array (not
    bytes as in a graph): the table name is still read right."""
    tf_client = reverb.TFClient(address)
    tf_client.insert([tf.constant(4.0)], tf.constant(["q"]), tf.constant([1.0], tf.float64))
    sample = tf_client.sample(tf.constant("q"), tf.float32)
    assert sample.data.numpy() == 4.0 and sample.info.times_sampled.numpy() == 1
    tf_client.update_priorities(
        tf.constant("nosig"), tf.constant([], tf.uint64), tf.constant([], tf.float64)
    )


def test_tf_client_in_a_v1_session(address):
    with tf.Graph().as_default():
        tf_client = reverb.TFClient(address)
        insert = tf_client.insert(
            [tf.constant(7.0)], tf.constant(["q", "q"]), tf.constant([1.0, 2.0], tf.float64)
        )
        sample = tf_client.sample("q", tf.float32)
        with tf.compat.v1.Session() as session:
            session.run(insert)
            assert session.run(sample).data == 7.0
            assert session.run(sample).info.priority == 2.0  # the queue's second item


@pytest.mark.parametrize(
    ("tables", "priorities", "message"),
    [
        (["t"], [1.0], None),
        ("t", [1.0], r"^tables must be a string tensor of rank 1$"),
        (["t"], np.float32([1.0]), r"^priorities must be a float64 tensor of rank 1$"),
        (["t", "q"], [1.0], r"^priorities and tables must have the same shape$"),
    ],
)
def test_tf_client_insert_build_time_errors(address, tables, priorities, message):
    tf_client = reverb.TFClient(address)
    tables = tf.constant(tables)
    priorities = tf.constant(
        priorities, tf.float32 if message and "float64" in message else tf.float64
    )
    if message is None:
        tf_client.insert([tf.constant(1.0)], tf.constant(["nosig"]), priorities)
        return
    with pytest.raises(ValueError, match=message):
        tf_client.insert([tf.constant(1.0)], tables, priorities)


def test_tf_client_run_time_errors(address):
    tf_client = reverb.TFClient(address)
    tf_client.insert([tf.constant(1.0)], tf.constant(["nosig"]), tf.constant([1.0], tf.float64))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"Type mismatch: actual float vs\. expect double"
    ):
        tf_client.sample("nosig", [tf.float64])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Got 6 but wanted 7"):
        tf_client.sample("nosig", [tf.float32, tf.float32])
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"Tensors `keys` and `priorities` do not match in shape \(\[2\] vs\. \[1\]\)",
    ):
        tf_client.update_priorities(
            "nosig", tf.constant([1, 2], tf.uint64), tf.constant([5.0], tf.float64)
        )
    with pytest.raises(ValueError, match="requested dtype uint64"):
        tf_client.update_priorities(
            "nosig", tf.constant([1], tf.int64), tf.constant([5.0], tf.float64)
        )


def test_import_without_tensorflow():
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "import recollect.reverb as reverb\n"
        "assert reverb.Client and reverb.Server\n"
        "try:\n    reverb.TrajectoryDataset\nexcept ImportError:\n    print('lazy')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "lazy"


def test_tf_client_sample_returns_the_first_step_of_a_trajectory_item(address):
    # dm-reverb 0.14 (baseline venv): a 3-step item of column 'a' = [0, 1, 2] sampled with
    # TFClient.sample(table, {'a': tf.float32}) gave data={'a': 0.0} (scalar, step 0)
    client = reverb.Client(address)
    with client.trajectory_writer(3) as writer:
        for i in range(3):
            writer.append({"a": np.float32(i)})
        writer.create_item("nosig", 1.0, {"a": writer.history["a"][:]})
    sample = reverb.TFClient(address).sample("nosig", {"a": tf.float32})
    assert sample.data["a"].numpy() == 0.0 and sample.data["a"].shape == ()
