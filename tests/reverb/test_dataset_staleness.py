"""Stale data: a dataset never serves a deleted item, beyond what was drawn before the
delete.

The bound: after an item is deleted (``mutate_priorities`` deletes, ``reset``, the FIFO
remover making room, ``max_times_sampled``), ``TrajectoryDataset`` with one sampler
serves it in at most ``max_in_flight_samples_per_worker - 1`` further elements (the rest
of the chunk drawn before the delete), with ``num_workers_per_iterator=w`` samplers in at
most ``(2 * w + 1) * max_in_flight_samples_per_worker`` (each sampler holds one drawn
chunk, one waits to be handed over, one is being served); TF-Agents'
``ReverbReplayBuffer.as_dataset`` of whole items with one sampler draws each batch when
it is asked for, so no batch asked for after the delete holds the item (a ``.prefetch``
inside ``as_dataset`` fails that test).
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import recollect.reverb as reverb  # noqa: E402

IN_FLIGHT = 4


def make_table(max_size: int = 100, max_times_sampled: int = 0) -> reverb.Table:
    return reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
        max_times_sampled=max_times_sampled,
    )


def insert(client: reverb.Client, values: range) -> None:
    with client.trajectory_writer(1) as writer:
        for v in values:
            writer.append(np.int64(v))
            writer.create_item("t", 1.0, writer.history[-1:])


def trajectory_dataset(server: reverb.Server, workers: int = 1, **options):
    return reverb.TrajectoryDataset(
        f"localhost:{server.port}",
        "t",
        dtypes=tf.int64,
        shapes=tf.TensorShape([1]),
        max_in_flight_samples_per_worker=IN_FLIGHT,
        num_workers_per_iterator=workers,
        **options,
    )


def trajectory_elements(server: reverb.Server, workers: int = 1):
    for element in trajectory_dataset(server, workers):
        yield int(element.info.key), int(element.data[0])


def served_after(elements, count: int) -> list[tuple[int, int]]:
    return [next(elements) for _ in range(count)]


def late(after: list[tuple[int, int]], stale, bound: int) -> list[int]:
    """Positions past ``bound`` (elements served after the delete) of stale elements."""
    return [i for i, (key, value) in enumerate(after) if i >= bound and stale(key, value)]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("how", ["mutate_priorities", "reset", "fifo"])
def test_trajectory_dataset_serves_deleted_items_only_from_draws_before_the_delete(how, workers):
    bound = IN_FLIGHT - 1 if workers == 1 else (2 * workers + 1) * IN_FLIGHT
    with reverb.Server([make_table(max_size=20 if how == "fifo" else 100)]) as server:
        client = server.localhost_client()
        insert(client, range(20))
        elements = trajectory_elements(server, workers)
        seen = served_after(elements, 10)
        if how == "mutate_priorities":
            deleted = {key for key, _ in seen}
            client.mutate_priorities("t", deletes=sorted(deleted))
            stale = lambda key, value: key in deleted  # noqa: E731
        elif how == "reset":
            client.reset("t")
            insert(client, range(1000, 1020))
            stale = lambda key, value: value < 1000  # noqa: E731
        else:  # the FIFO remover makes room for 20 new items: every old one goes
            insert(client, range(1000, 1020))
            stale = lambda key, value: value < 1000  # noqa: E731
        after = served_after(elements, 60)
        assert late(after, stale, bound) == []
        assert any(not stale(k, v) for k, v in after)


@pytest.mark.parametrize("workers", [1, 2])
def test_no_item_is_served_more_often_than_max_times_sampled(workers):
    """Read-ahead never serves an item beyond its ``max_times_sampled`` budget: every draw
    counts at the table when it is made, so an item drawn ahead is removed as Reverb
    removes it. The dataset ends (rate limiter timeout) once every budget is spent.
    dm-reverb 0.14.0 gives the same on this scenario: 80 elements, each value at most 2."""
    times = 2
    with reverb.Server([make_table(max_times_sampled=times)]) as server:
        client = server.localhost_client()
        insert(client, range(20))
        elements = iter(trajectory_dataset(server, workers, rate_limiter_timeout_ms=1000))
        first = [int(next(elements).data[0]) for _ in range(30)]
        insert(client, range(1000, 1020))
        rest = [int(e.data[0]) for e in elements]  # ends when the table is empty
    counts = {v: (first + rest).count(v) for v in set(first + rest)}
    assert max(counts.values()) <= times, counts
    assert len(first) + len(rest) == 40 * times  # every budget spent, then the end


@pytest.mark.parametrize("how", ["mutate_priorities", "reset", "fifo"])
def test_reverb_replay_buffer_as_dataset_batches_asked_for_after_a_delete_hold_no_deleted_item(
    how,
):
    """TF-Agents' ``ReverbReplayBuffer.as_dataset(sample_batch_size)`` of whole items with
    one sampler: every batch is drawn when it is asked for (bound 0)."""
    from recollect.tf_agents import reverb_replay_buffer

    server = reverb.Server([make_table(max_size=20 if how == "fifo" else 100)])
    try:
        client = server.localhost_client()
        insert(client, range(20))
        replay_buffer = reverb_replay_buffer.ReverbReplayBuffer(
            tf.TensorSpec([], tf.int64), table_name="t", sequence_length=1, local_server=server
        )
        batches = iter(replay_buffer.as_dataset(sample_batch_size=8))

        def served(count: int) -> list[tuple[int, int]]:
            out = []
            for _ in range(count):
                data, info = next(batches)
                assert data.shape == (8, 1)
                keys, values = info.key.numpy()[:, 0].tolist(), data.numpy()[:, 0].tolist()
                out.extend(zip(keys, values, strict=True))
            return out

        seen = served(2)  # 16 draws of 20 items: some are never seen, so some survive
        if how == "mutate_priorities":
            deleted = {key for key, _ in seen}
            client.mutate_priorities("t", deletes=sorted(deleted))
            stale = lambda key, value: key in deleted  # noqa: E731
        else:
            if how == "reset":
                client.reset("t")
            insert(client, range(1000, 1020))  # fifo: every old item makes room
            stale = lambda key, value: value < 1000  # noqa: E731
        after = served(10)
        assert late(after, stale, 0) == []
        assert any(not stale(k, v) for k, v in after)
    finally:
        server.stop()
