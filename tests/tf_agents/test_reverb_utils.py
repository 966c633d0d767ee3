"""TF-Agents' Reverb observers on recollect.reverb: the items they write (TF-Agents'
``reverb_utils.py`` is the specification), read back in insertion order from queues."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import recollect.reverb as reverb
from recollect.tf_agents import reverb_utils

Trajectory = collections.namedtuple(  # TF-Agents' field order
    "Trajectory",
    ["step_type", "observation", "action", "policy_info", "next_step_type", "reward", "discount"],
)
FIRST, MID, LAST = 0, 1, 2


def episode(length: int, start: float) -> list[Trajectory]:
    """``length`` steps whose observations count up from ``start``; the last step is
    the boundary step (LAST -> FIRST), as a py driver hands them to an observer."""
    steps = []
    for i in range(length):
        step_type = FIRST if i == 0 else (LAST if i == length - 1 else MID)
        next_type = LAST if i == length - 2 else (FIRST if i == length - 1 else MID)
        steps.append(
            Trajectory(
                step_type=np.int32(step_type),
                observation=np.full(2, start + i, np.float32),
                action=np.int64(i),
                policy_info=(),
                next_step_type=np.int32(next_type),
                reward=np.float32(0.0 if i == length - 1 else 1.0),
                discount=np.float32(0.0 if next_type == LAST else 1.0),
            )
        )
    return steps


@pytest.fixture
def server():
    tables = [reverb.Table.queue(name, 1000) for name in ("q", "q2")]
    with reverb.Server(tables) as server:
        yield server


#: the flat columns of a Trajectory step (``policy_info=()`` has no leaves)
COLUMNS = ["step_type", "observation", "action", "next_step_type", "reward", "discount"]


def items(client, table: str = "q") -> list[dict[str, np.ndarray]]:
    """Every item of queue ``table`` by column name, oldest first (the queue empties)."""
    size = client.server_info()[table].current_size
    if size == 0:
        return []
    samples = client.sample(table, num_samples=size, emit_timesteps=False)
    return [dict(zip(COLUMNS, map(np.asarray, sample.data), strict=True)) for sample in samples]


def observations(item: dict[str, np.ndarray]) -> list[float]:
    return [float(row[0]) for row in item["observation"]]


def test_windows_of_two_never_span_an_episode_boundary(server):
    client = server.localhost_client()
    observer = reverb_utils.ReverbAddTrajectoryObserver(client, "q", sequence_length=2)
    for e in range(3):
        for step in episode(10, 100.0 * e):
            observer(step)
    observer.flush()
    got = [observations(item) for item in items(client)]
    want = [[100.0 * e + i, 100.0 * e + i + 1] for e in range(3) for i in range(9)]
    assert got == want  # 9 items per episode, 27 in all, as the seed fixture's


def test_stride_and_several_tables(server):
    client = server.localhost_client()
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        client, ["q", "q2"], sequence_length=3, stride_length=2
    )
    for step in episode(10, 0.0):
        observer(step)
    observer.close()
    want = [[0.0, 1.0, 2.0], [2.0, 3.0, 4.0], [4.0, 5.0, 6.0], [6.0, 7.0, 8.0]]
    assert [observations(i) for i in items(client, "q")] == want
    assert [observations(i) for i in items(client, "q2")] == want


@pytest.mark.parametrize("tile", [False, True])
def test_padding_writes_the_end_of_short_episodes(server, tile):
    client = server.localhost_client()
    observer = reverb_utils.ReverbAddTrajectoryObserver(
        client, "q", sequence_length=4, pad_end_of_episodes=True, tile_end_of_episodes=tile
    )
    for step in episode(3, 1.0):  # F M L
        observer(step)
    observer.flush()
    got = items(client)
    if tile:  # F M L P, M L P P, L P P P
        assert [observations(i) for i in got] == [[1, 2, 3, 0], [2, 3, 0, 0], [3, 0, 0, 0]]
    else:  # F M L P
        assert [observations(i) for i in got] == [[1, 2, 3, 0]]
    padding = got[0]["step_type"][3], got[0]["next_step_type"][3]
    assert padding == (LAST, FIRST)  # a zero boundary step


def test_without_padding_short_episodes_are_dropped_and_reset_says_why(server):
    client = server.localhost_client()
    observer = reverb_utils.ReverbAddTrajectoryObserver(client, "q", sequence_length=4)
    for step in episode(3, 0.0):
        observer(step)
    observer.flush()
    assert items(client) == []
    observer(episode(3, 0.0)[0])
    with pytest.raises(ValueError, match="consider enabling pad_end_of_episodes"):
        observer.reset(write_cached_steps=True)
    with pytest.raises(ValueError, match="pad_end_of_episodes=True"):
        reverb_utils.ReverbAddTrajectoryObserver(client, "q", 2, tile_end_of_episodes=True)


def test_sequence_observer_spans_boundaries(server):
    client = server.localhost_client()
    observer = reverb_utils.ReverbTrajectorySequenceObserver(client, "q", sequence_length=2)
    for step in episode(3, 0.0) + episode(3, 10.0):
        observer(step)
    observer.flush()
    assert [observations(i) for i in items(client)] == [
        [0, 1], [1, 2], [2, 10], [10, 11], [11, 12]
    ]  # fmt: skip


def test_episode_observer_writes_whole_episodes(server, caplog):
    client = server.localhost_client()
    observer = reverb_utils.ReverbAddEpisodeObserver(client, "q", max_sequence_length=5)
    for step in episode(3, 0.0) + episode(5, 10.0):
        observer(step)
    observer.flush()
    assert [observations(i) for i in items(client)] == [[0, 1, 2], [10, 11, 12, 13, 14]]
    with pytest.raises(ValueError, match="exceeds `max_sequence_length`"):
        for step in episode(6, 20.0):
            observer(step)
    bypass = reverb_utils.ReverbAddEpisodeObserver(
        client, "q2", max_sequence_length=3, bypass_partial_episodes=True
    )
    for step in episode(5, 0.0) + episode(2, 50.0):
        bypass(step)
    bypass.flush()
    assert [observations(i) for i in items(client, "q2")] == [[50, 51]]
    assert "This episode is bypassed" in caplog.text
    with pytest.raises(ValueError, match="greater equal one"):
        reverb_utils.ReverbAddEpisodeObserver(client, "q", max_sequence_length=0)


def test_batched_steps_are_refused_with_what_to_do(server):
    client = server.localhost_client()
    observer = reverb_utils.ReverbAddTrajectoryObserver(client, "q", sequence_length=2)
    batched = Trajectory(*(np.stack([v, v]) if not isinstance(v, tuple) else v
                           for v in episode(2, 0.0)[0]))  # fmt: skip
    with pytest.raises(ValueError, match="one unbatched step per call"):
        observer(batched)
