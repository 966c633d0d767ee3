"""TF-Agents' ReverbReplayBuffer on recollect.reverb (TF-Agents 0.19's
``reverb_replay_buffer.py`` is the specification), and the seed manager's flow:
sbsim's ReplayBufferManager with its imports switched."""

from __future__ import annotations

import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import recollect.reverb as reverb  # noqa: E402
from recollect.specs import ArraySpec  # noqa: E402
from recollect.tf_agents import reverb_replay_buffer, reverb_utils  # noqa: E402

Trajectory = collections.namedtuple(  # TF-Agents' field order
    "Trajectory",
    ["step_type", "observation", "action", "policy_info", "next_step_type", "reward", "discount"],
)
FIRST, MID, LAST = 0, 1, 2
SPEC = Trajectory(
    step_type=tf.TensorSpec([], tf.int32),
    observation=tf.TensorSpec([17], tf.float32),
    action=tf.TensorSpec([6], tf.float32),
    policy_info=(),
    next_step_type=tf.TensorSpec([], tf.int32),
    reward=tf.TensorSpec([], tf.float32),
    discount=tf.TensorSpec([], tf.float32),
)


def episode(length: int, number: int) -> list[Trajectory]:
    """``length`` steps; observation[0] = 100 * number + step; the last one is the boundary."""
    steps = []
    for i in range(length):
        step_type = FIRST if i == 0 else (LAST if i == length - 1 else MID)
        next_type = LAST if i == length - 2 else (FIRST if i == length - 1 else MID)
        steps.append(
            Trajectory(
                step_type=np.int32(step_type),
                observation=np.full(17, 100 * number + i, np.float32),
                action=np.full(6, i, np.float32),
                policy_info=(),
                next_step_type=np.int32(next_type),
                reward=np.float32(1.0),
                discount=np.float32(0.0 if next_type == LAST else 1.0),
            )
        )
    return steps


def uniform_table(name: str = "uniform", max_size: int = 1000) -> reverb.Table:
    # sbsim's ReplayBufferManager table (its signature left out: see
    # test_trajectory_signature_table below)
    return reverb.Table(
        name,
        max_size=max_size,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


def assert_windows_within_episodes(trajectory, info) -> None:
    obs = trajectory.observation.numpy()[..., 0]  # [B, 2]
    np.testing.assert_array_equal(obs[:, 1], obs[:, 0] + 1)  # consecutive steps ...
    np.testing.assert_array_equal(obs[:, 1] // 100, obs[:, 0] // 100)  # ... of one episode
    assert (trajectory.step_type.numpy()[:, 0] != LAST).all()
    key = info.key.numpy()
    np.testing.assert_array_equal(key[:, 0], key[:, 1])  # info repeated along time


def test_seed_manager_flow(tmp_path):
    checkpointer = reverb.platform.checkpointers_lib.DefaultCheckpointer(path=str(tmp_path))
    server = reverb.Server([uniform_table()], port=None, checkpointer=checkpointer)
    replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
        SPEC, table_name="uniform", sequence_length=2, local_server=server
    )
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        replay_buffer.py_client, "uniform", sequence_length=2, stride_length=1
    )
    lengths = [10, 7, 12]
    for number, length in enumerate(lengths):
        for step in episode(length, number):
            observer(step)
    observer.flush()
    assert replay_buffer.num_frames() == sum(n - 1 for n in lengths)  # items, no boundary span

    dataset = replay_buffer.as_dataset(
        sample_batch_size=64, num_steps=2, num_parallel_calls=3
    ).prefetch(3)
    trajectory, info = dataset.element_spec
    assert trajectory.observation == tf.TensorSpec([64, 2, 17], tf.float32)
    assert info == reverb.SampleInfo(
        tf.TensorSpec([64, 2], tf.uint64),
        tf.TensorSpec([64, 2], tf.float64),
        tf.TensorSpec([64, 2], tf.int64),
        tf.TensorSpec([64, 2], tf.float64),
        tf.TensorSpec([64, 2], tf.int32),
    )
    seen = set()
    for trajectory, info in dataset.take(5):
        assert trajectory.observation.shape == (64, 2, 17)
        assert_windows_within_episodes(trajectory, info)
        seen.update(trajectory.observation.numpy()[:, 0, 0].tolist())
    assert len(seen) > 20  # sampled across the episodes

    replay_buffer.py_client.checkpoint()
    frames = replay_buffer.num_frames()
    server.stop()
    restored = reverb.Server([uniform_table()], port=None, checkpointer=checkpointer)
    again = reverb_replay_buffer.ReverbReplayBuffer(
        SPEC, table_name="uniform", sequence_length=2, local_server=restored
    )
    assert again.num_frames() == frames
    trajectory, info = next(iter(again.as_dataset(sample_batch_size=64, num_steps=2)))
    assert_windows_within_episodes(trajectory, info)
    restored.stop()


@pytest.fixture
def server():
    tables = [uniform_table(), reverb.Table.queue("queue", 100)]
    prioritized = reverb.Table(
        "prioritized",
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([*tables, prioritized]) as server:
        yield server


def fill(buffer, table: str, lengths=(6, 6)) -> None:
    observer = reverb_utils.ReverbAddTrajectoryObserver(buffer.py_client, table, 2)
    for number, length in enumerate(lengths):
        for step in episode(length, number):
            observer(step)
    observer.flush()


def test_properties(server):
    buffer = reverb_replay_buffer.ReverbReplayBuffer(
        SPEC, "uniform", 2, server_address=f"localhost:{server.port}"
    )
    assert buffer.capacity == 1000 and buffer.data_spec is SPEC and buffer.local_server is None
    assert isinstance(buffer.py_client, reverb.Client)
    assert isinstance(buffer.tf_client, reverb.TFClient)
    assert buffer.get_table_info().max_size == 1000
    assert buffer.num_frames() == 0
    fill(buffer, "uniform")
    assert buffer.num_frames() == 10
    buffer.clear()
    assert buffer.num_frames() == 0


def test_argument_errors_are_tf_agents(server):
    with pytest.raises(ValueError, match=r"^Exactly one of the server_address or local_server"):
        reverb_replay_buffer.ReverbReplayBuffer(SPEC, "uniform", 2)
    with pytest.raises(ValueError, match=r"^Exactly one of the server_address or local_server"):
        reverb_replay_buffer.ReverbReplayBuffer(
            SPEC, "uniform", 2, server_address="localhost:1", local_server=server
        )
    buffer = reverb_replay_buffer.ReverbReplayBuffer(SPEC, "uniform", 4, local_server=server)
    with pytest.raises(ValueError, match=r"num_steps > sequence_length \(5 vs\. 4\)$"):
        buffer.as_dataset(2, num_steps=5)
    with pytest.raises(ValueError, match=r"not a multiple of num_steps \(3 vs\. 4\)$"):
        buffer.as_dataset(2, num_steps=3)
    with pytest.raises(
        ValueError, match=r"^num_parallel_calls cannot be bigger than sample_batch_size 5 > 4$"
    ):
        buffer.as_dataset(4, num_steps=2, num_parallel_calls=5)
    with pytest.raises(ValueError, match=r"^Unable to perform a single deterministic pass"):
        buffer.as_dataset(4, single_deterministic_pass=True)
    with pytest.raises(NotImplementedError, match="does not support `add_batch`"):
        buffer.add_batch(None)
    with pytest.raises(NotImplementedError, match="does not support `get_next`"):
        buffer.get_next()
    with pytest.raises(NotImplementedError, match="does not support `gather_all`"):
        buffer.gather_all()


def test_num_steps_below_sequence_length_splits_items(server):
    buffer = reverb_replay_buffer.ReverbReplayBuffer(SPEC, "uniform", 2, local_server=server)
    fill(buffer, "uniform")
    trajectory, info = next(iter(buffer.as_dataset(sample_batch_size=8, num_steps=1)))
    assert trajectory.observation.shape == (8, 1, 17) and info.key.shape == (8, 1)
    assert set(trajectory.observation.numpy()[:, 0, 0].tolist()) <= {*range(0, 6), *range(100, 106)}
    single, _ = next(iter(buffer.as_dataset(num_steps=2)))  # no batch axis
    assert single.observation.shape == (2, 17)


def test_sequence_preprocess_fn_sees_each_item(server):
    buffer = reverb_replay_buffer.ReverbReplayBuffer(SPEC, "uniform", 2, local_server=server)
    fill(buffer, "uniform")

    def negate(trajectory):
        assert trajectory.observation.shape == (2, 17)
        return trajectory._replace(observation=-trajectory.observation)

    trajectory, _ = next(iter(buffer.as_dataset(4, 2, sequence_preprocess_fn=negate)))
    assert (trajectory.observation.numpy() <= 0).all()


def test_single_deterministic_pass_reads_a_queue_in_order(server):
    buffer = reverb_replay_buffer.ReverbReplayBuffer(
        SPEC, "queue", 2, local_server=server, rate_limiter_timeout_ms=100
    )
    fill(buffer, "queue", lengths=(4,))
    got = [
        t.observation.numpy()[:, 0].tolist()
        for t, _ in buffer.as_dataset(num_steps=2, single_deterministic_pass=True)
    ]
    assert got == [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]]  # then the timeout ends it


def test_rate_limiter_timeout_ends_as_dataset(server):
    buffer = reverb_replay_buffer.ReverbReplayBuffer(
        SPEC, "queue", 2, local_server=server, rate_limiter_timeout_ms=50
    )
    assert list(buffer.as_dataset(sample_batch_size=4, num_steps=2)) == []


def test_update_priorities(server):
    buffer = reverb_replay_buffer.ReverbReplayBuffer(SPEC, "prioritized", 2, local_server=server)
    fill(buffer, "prioritized", lengths=(3,))
    _, info = next(iter(buffer.as_dataset(sample_batch_size=1, num_steps=2)))
    key = info.key[:, 0]
    buffer.update_priorities(key, tf.constant([7.0], tf.float64))
    priorities = {
        s.info.key: s.info.priority
        for s in buffer.py_client.sample("prioritized", 50, emit_timesteps=False)
    }
    assert priorities[int(key.numpy()[0])] == 7.0


def test_array_spec_data_spec(server):
    """Without TF-Agents: recollect ArraySpecs in a dict."""
    spec = {"obs": ArraySpec((3,), np.float32), "step_type": ArraySpec((), np.int32)}
    buffer = reverb_replay_buffer.ReverbReplayBuffer(spec, "uniform", 2, local_server=server)
    with buffer.py_client.trajectory_writer(2) as writer:
        for i in range(4):
            writer.append({"obs": np.full(3, i, np.float32), "step_type": np.int32(1)})
            if i:
                writer.create_item("uniform", 1.0, {k: v[-2:] for k, v in writer.history.items()})
    data, _ = next(iter(buffer.as_dataset(sample_batch_size=3, num_steps=2)))
    obs = data["obs"].numpy()
    assert obs.shape == (3, 2, 3)
    np.testing.assert_array_equal(obs[:, 1, 0], obs[:, 0, 0] + 1)


def test_trajectory_signature_table():
    """A table whose signature is a Trajectory namedtuple (sbsim's, TF-Agents'): its
    server_info decodes it, the buffer is built on it, and items are written and read."""
    signature = tf.nest.map_structure(lambda s: tf.TensorSpec([2, *s.shape], s.dtype), SPEC)
    table = reverb.Table(
        "uniform",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    with reverb.Server([table]) as server:
        buffer = reverb_replay_buffer.ReverbReplayBuffer(SPEC, "uniform", 2, local_server=server)
        info = buffer.get_table_info().signature
        assert type(info) is type(SPEC) and info._fields == SPEC._fields
        observer = reverb_utils.ReverbAddTrajectoryObserver(buffer.py_client, "uniform", 2)
        for step in episode(4, 0):
            observer(step)
        observer.flush()
        assert buffer.num_frames() == 3
        data, _ = next(iter(buffer.as_dataset(sample_batch_size=2, num_steps=2)))
        assert data.observation.shape[:2] == (2, 2)


def test_tf_agents_trajectory_and_bounded_specs(server):
    """With TF-Agents installed (the TF 2.15 + tf-agents 0.19 world): its own Trajectory
    and BoundedTensorSpec leaves, fed by its own Trajectory steps."""
    trajectory_lib = pytest.importorskip("tf_agents.trajectories.trajectory")
    tensor_spec = pytest.importorskip("tf_agents.specs.tensor_spec")
    spec = trajectory_lib.Trajectory(
        **{
            **SPEC._asdict(),
            "action": tensor_spec.BoundedTensorSpec([6], tf.float32, -1.0, 1.0),
        }
    )
    buffer = reverb_replay_buffer.ReverbReplayBuffer(spec, "uniform", 2, local_server=server)
    observer = reverb_utils.ReverbAddTrajectoryObserver(buffer.py_client, "uniform", 2)
    for number, length in enumerate([5, 6]):
        for step in episode(length, number):
            observer(trajectory_lib.Trajectory(**step._asdict()))
    observer.flush()
    assert buffer.num_frames() == 9
    trajectory, info = next(iter(buffer.as_dataset(sample_batch_size=16, num_steps=2)))
    assert isinstance(trajectory, trajectory_lib.Trajectory)
    assert_windows_within_episodes(trajectory, info)
