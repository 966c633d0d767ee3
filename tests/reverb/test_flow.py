"""Flow control as Reverb: blocking queues, timeouts, max_times_sampled, orders, deletes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import recollect.reverb as reverb


def _values(client: reverb.Client, table: str, n: int) -> list[int]:
    return [int(s.data[0][0]) for s in client.sample(table, n, emit_timesteps=False)]


def test_queue_returns_items_in_insertion_order_once() -> None:
    with reverb.Server([reverb.Table.queue("q", 10)]) as server:
        client = server.localhost_client()
        for i in range(6):
            client.insert(np.int64(i), {"q": 1.0})
        assert _values(client, "q", 4) == [0, 1, 2, 3]
        assert server.core.tables["q"].info.current_size == 2


def test_stack_returns_newest_first() -> None:
    with reverb.Server([reverb.Table.stack("s", 10)]) as server:
        client = server.localhost_client()
        for i in range(5):
            client.insert(np.int64(i), {"s": 1.0})
        assert _values(client, "s", 3) == [4, 3, 2]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (reverb.selectors.MinHeap, [1, 2, 3]),
        (reverb.selectors.MaxHeap, [9, 7, 3]),
    ],
)
def test_heaps_sample_by_priority(selector, expected: list[int]) -> None:
    table = reverb.Table(
        "h",
        selector(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for p in [3, 9, 1, 7, 2]:
            client.insert(np.int64(p), {"h": float(p)})
        assert _values(client, "h", 3) == expected


def test_fifo_remover_drops_oldest_when_full() -> None:
    table = reverb.Table(
        "t",
        reverb.selectors.Fifo(),
        reverb.selectors.Fifo(),
        3,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for i in range(5):
            client.insert(np.int64(i), {"t": 1.0})
        assert _values(client, "t", 3) == [2, 3, 4]


def test_max_times_sampled_removes_items() -> None:
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=2,
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        client.insert(np.int64(5), {"t": 1.0})
        client.insert(np.int64(6), {"t": 1.0})
        times = [s[0].info.times_sampled for s in client.sample("t", 4)]
        assert sorted(times) == [1, 1, 2, 2]
        assert table.info.current_size == 0


def test_blocked_insert_times_out_with_deadline_exceeded() -> None:
    with reverb.Server([reverb.Table.queue("q", 1)]) as server:
        client = server.localhost_client()
        writer = client.trajectory_writer(1)
        writer.append([1])
        writer.create_item("q", 1.0, writer.history[0][:])
        writer.create_item("q", 1.0, writer.history[0][:])
        with pytest.raises(reverb.errors.DeadlineExceededError, match="did not complete within"):
            writer.flush(timeout_ms=10)
        assert server.core.tables["q"].info.current_size == 1
        list(client.sample("q", 1))
        writer.flush(timeout_ms=1000)  # the queued item goes in once there is room
        assert server.core.tables["q"].info.current_size == 1
        writer.close()


def test_blocked_sample_waits_for_an_insert() -> None:
    with reverb.Server([reverb.Table.queue("q", 2)]) as server:
        client = server.localhost_client()
        got = []
        reader = threading.Thread(target=lambda: got.extend(_values(client, "q", 1)))
        reader.start()
        reader.join(0.1)
        assert reader.is_alive()
        client.insert(np.int64(42), {"q": 1.0})
        reader.join(10)
        assert got == [42]


def test_updates_and_deletes_of_unknown_keys_are_ignored() -> None:
    table = reverb.Table(
        "t", reverb.selectors.MaxHeap(), reverb.selectors.Fifo(), 2, reverb.rate_limiters.MinSize(1)
    )
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for i in range(3):  # the first is removed: its key becomes stale
            client.insert(np.int64(i), {"t": 1.0})
        keys = [s.info.key for s in client.sample("t", 1, emit_timesteps=False)]
        first_key = 0  # keys are (counter << shift) | slot; the first item's is 0
        client.mutate_priorities(
            "t", updates={first_key: 100.0, keys[0]: 5.0}, deletes=[first_key, 123456789]
        )
        assert table.info.current_size == 2
        top = next(client.sample("t", 1, emit_timesteps=False))
        assert top.info.key == keys[0] and top.info.priority == 5.0
        client.mutate_priorities("t", deletes=[keys[0]])
        assert table.info.current_size == 1


def test_reset_clears_items_and_counters() -> None:
    table = reverb.Table.queue("q", 5)
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        for i in range(3):
            client.insert(np.int64(i), {"q": 1.0})
        client.reset("q")
        info = table.info
        assert info.current_size == 0 and info.rate_limiter_info.insert_stats.completed == 0
        assert info.num_episodes == 0 and table.can_insert(5)
