"""A quiet writer's queued items reach the table within milliseconds, with no ``flush``
(Reverb streams each item as its data completes; TF-Agents' observers rely on it)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import recollect.reverb as reverb
from recollect.reverb.linger import LINGER, LINGER_S, RETRY_MAX_S
from recollect.reverb.stream import MAX_PENDING, WriterStream


def _size(client: reverb.Client, table: str = "t") -> int:
    return int(client.server_info()[table].current_size)


def _wait_for(predicate: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return bool(predicate())


def _count_writes(client: reverb.Client) -> list[str]:
    """A list that gets one entry per ``write`` call of ``client``'s channel (a writer's send)."""
    writes: list[str] = []
    channel = client.channel
    call = channel.call

    def counting(method: str, *args: Any) -> Any:
        if method == "write":
            writes.append(method)
        return call(method, *args)

    channel.call = counting
    return writes


def _fifo_server(max_size: int = 10_000) -> reverb.Server:
    """A queue table "t": samples come back once each, in insertion order."""
    return reverb.Server([reverb.Table.queue("t", max_size)])


def test_items_reach_the_table_without_flush() -> None:
    """TF-Agents' test_trajectory_observer_no_mock: 5 steps, 2-step items, no flush."""
    with _fifo_server() as server:
        client = server.localhost_client()
        writer = client.trajectory_writer(num_keep_alive_refs=2)
        for i in range(5):
            writer.append({"x": np.float32(i)})
            if writer.episode_steps >= 2:
                writer.create_item("t", 1.0, {"x": writer.history["x"][-2:]})
        assert _wait_for(lambda: _size(client) == 4), _size(client)
        got = [s.data[0].tolist() for s in client.sample("t", 4, emit_timesteps=False)]
        assert got == [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]
        writer.close()


def test_a_busy_writer_still_sends_in_batches() -> None:
    """Sends come from a full queue or a linger deadline: never one per item."""
    with _fifo_server() as server:
        client = server.localhost_client()
        writes = _count_writes(client)
        n = 4 * MAX_PENDING
        start = time.monotonic()
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            for i in range(n):
                writer.append({"x": np.int64(i)})
                writer.create_item("t", 1.0, {"x": writer.history["x"][-1]})
            elapsed = time.monotonic() - start
        assert _size(client) == n
        # full queues, one linger send per LINGER_S of writing, and the closing flush
        assert len(writes) <= n // MAX_PENDING + elapsed / LINGER_S + 2, (len(writes), elapsed)


def test_rate_limited_items_go_in_when_the_limiter_allows() -> None:
    """A full queue table takes the rest once a sample frees room, still without flush."""
    with reverb.Server([reverb.Table.queue("q", 2)]) as server:
        client = server.localhost_client()
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        for i in range(3):
            writer.append({"x": np.int64(i)})
            writer.create_item("q", 1.0, {"x": writer.history["x"][-1]})
        assert _wait_for(lambda: _size(client, "q") == 2)
        assert int(next(iter(client.sample("q", 1, emit_timesteps=False))).data[0]) == 0
        assert _wait_for(lambda: _size(client, "q") == 2)
        got = [int(s.data[0]) for s in client.sample("q", 2, emit_timesteps=False)]
        assert got == [1, 2]
        writer.close()


def test_many_lingering_sends_keep_every_item_intact() -> None:
    """A writer that pauses often is sent from the linger thread between its appends: the
    server gets every step once, in order (the stream's lock keeps the columns whole)."""
    n = 600
    with _fifo_server() as server:
        client = server.localhost_client()
        with client.trajectory_writer(num_keep_alive_refs=3) as writer:
            for i in range(n):
                writer.append({"obs": np.full(3, i, np.int32), "r": np.float64(i)})
                if writer.episode_steps >= 3:
                    writer.create_item(
                        "t", 1.0, {"obs": writer.history["obs"][-3:], "r": writer.history["r"][-1]}
                    )
                if i % 37 == 0:
                    time.sleep(2 * LINGER_S)  # the linger thread sends mid-episode
        got = list(client.sample("t", n - 2, emit_timesteps=False))
    obs = np.stack([s.data[0] for s in got])
    first = np.arange(n - 2)
    np.testing.assert_array_equal(
        obs, np.broadcast_to((first[:, None] + np.arange(3))[..., None], obs.shape)
    )
    np.testing.assert_array_equal([float(s.data[1]) for s in got], first + 2)


class _FailingChannel:
    """A channel whose writes fail: what a server that went away looks like."""

    def __init__(self) -> None:
        self.writes = 0

    def call(self, method: str, args: Any, timeout: Any) -> Any:
        if method == "open_stream":
            return 7
        if method == "write":
            self.writes += 1
            raise ConnectionError("the server is gone")
        return None


def test_a_failed_background_send_raises_at_the_writers_next_call() -> None:
    channel = _FailingChannel()
    stream = WriterStream(channel, 1)
    (ref,) = stream.append([np.int64(1)], partial=False)
    stream.create_item("t", 1.0, [[ref]], [True])  # queued; nothing raised yet
    assert _wait_for(lambda: channel.writes == 1)
    assert _wait_for(lambda: stream.error is not None)
    with pytest.raises(ConnectionError, match="the server is gone") as info:
        stream.append([np.int64(2)], partial=False)
    assert any("background send" in note for note in info.value.__notes__)
    assert stream.pending == 0  # the failed items were dropped, as Reverb drops them
    assert stream.error is None  # raised once


def test_a_collected_stream_is_forgotten() -> None:
    class Counting:
        calls = 0

        def send_lingering(self) -> float | None:
            Counting.calls += 1
            return None

    gone = Counting()
    LINGER.arm(gone)
    del gone
    kept = Counting()
    LINGER.arm(kept)
    assert _wait_for(lambda: Counting.calls == 1)
    time.sleep(3 * LINGER_S)
    assert Counting.calls == 1


def test_refused_items_are_retried_with_a_growing_delay() -> None:
    """A table that keeps refusing (a full queue nobody samples) is tried after 20, 40,
    80 ms and then every RETRY_MAX_S, not every LINGER_S: about 12 writes in a second."""
    with reverb.Server([reverb.Table.queue("q", 1)]) as server:
        client = server.localhost_client()
        writes = _count_writes(client)
        writer = client.trajectory_writer(num_keep_alive_refs=1)
        for i in range(2):
            writer.append({"x": np.int64(i)})
            writer.create_item("q", 1.0, {"x": writer.history["x"][-1]})
        time.sleep(1.0)
        tries = len(writes)
        assert 2 <= tries <= 2 * (3 + (1.0 - 0.14) / RETRY_MAX_S), tries  # 50 without backoff
        assert _size(client, "q") == 1
        assert int(next(iter(client.sample("q", 1, emit_timesteps=False))).data[0]) == 0
        assert _wait_for(lambda: _size(client, "q") == 1)  # the refused item, still no flush
        writer.close()
