"""A Ray shard's chunk socket flooded by 2,000 local peers without the token: the
shard's threads and file descriptors stay near their baseline, a writer opened during
the flood still gets the socket (it takes the slot of the oldest peer), and so does one
opened after the handshake deadline. A writer the socket refused once sends over Ray
calls and moves to the socket when it tries again."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np
import pytest
from test_ray_channel_flood import connect_peer

import recollect as rc
from recollect.ray.channel import HANDSHAKE_TIMEOUT_S

ray = pytest.importorskip("ray")
rc_ray = pytest.importorskip("recollect.ray")
from recollect.ray import actor as ray_actor  # noqa: E402
from recollect.ray.actor import ChunkCall  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts /proc/<pid>/fd")


@pytest.fixture(scope="module", autouse=True)
def _ray(ray_session):
    return ray_session


def stats(pid: int) -> tuple[int, int]:
    """(threads, open file descriptors) of process ``pid``."""
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def write_one_chunk(client: rc.service.Client) -> bool:
    """Writes and flushes one chunk; returns whether it went over the socket."""
    writer = client.writer("t", 2, chunk_length=2)
    writer.add_batch({"x": np.zeros(2, np.int64)})
    writer.add_batch({"x": np.ones(2, np.int64)})
    over_socket = type(writer._in_flight[0]) is ChunkCall
    writer.close()
    return over_socket


@pytest.mark.slow  # ~10 s (2,000 peers and a Ray shard): CI and --run-slow
def test_a_flooded_shard_keeps_its_threads_and_takes_writers() -> None:
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.int64)}, 400, 2)
    client = rc_ray.serve({"t": buf}, name="flooded", rng=0)
    try:
        actor = client.endpoints("t")[0].actor
        listener = ray.get(actor.chunk_listener.remote())
        pid = rc_ray.shard_locations(client, "t")[0]["pid"]
        assert write_one_chunk(client)  # warm: the shard's threads exist
        before = stats(pid)
        peers = []
        for k in range(2000):  # bounded: 1 s per connect
            peer = connect_peer(listener["address"])
            if peer is not None:
                if k % 2:  # 1 of the 4 frame-header bytes (unless the shard closed it already)
                    with contextlib.suppress(OSError):
                        peer.send(b"\0")
                peers.append(peer)
        flooded = time.monotonic()
        during = stats(pid)
        start = time.monotonic()
        during_over_socket = write_one_chunk(client)
        fallback_s = time.monotonic() - start
        time.sleep(max(flooded + HANDSHAKE_TIMEOUT_S - time.monotonic(), 0.0) + 0.2)
        start = time.monotonic()
        after_over_socket = write_one_chunk(client)
        after_deadline_s = time.monotonic() - start
        at_deadline = stats(pid)
        for peer in peers:
            peer.close()
        time.sleep(0.2)
        after = stats(pid)
        print(
            f"\n{len(peers)} peers: shard (threads, fds) {before} -> {during} (flood) -> "
            f"{at_deadline} (deadline) -> {after} (closed); writer during the flood "
            f"{fallback_s:.3f} s, after the deadline {after_deadline_s:.3f} s (both socket)"
        )
        assert len(peers) >= 1000
        assert during[0] <= before[0] + 4 and during[1] <= before[1] + 64 + 8
        assert at_deadline[0] <= before[0] + 4 and at_deadline[1] <= before[1] + 8
        assert after[0] <= before[0] + 4 and after[1] <= before[1] + 8
        assert during_over_socket  # the peers' slots did not keep the writer out
        assert after_over_socket  # after the deadline: over the socket again
        assert client.info("t").inserts == 12
    finally:
        client.close()


def test_a_writer_refused_once_moves_to_the_socket_when_it_tries_again(monkeypatch) -> None:
    """The first connect is refused (as by a listener whose slots are taken): the first
    chunks go as Ray calls, the writer tries the socket again after RETRY_FIRST_S, and
    the chunks after that go over the socket, all stored in the order written."""
    refusals = [ConnectionRefusedError("the chunk listener refused (simulated)")]
    real_channel = ray_actor.ChunkChannel

    def refused_once(*args, **kwargs):
        if refusals:
            raise refusals.pop()
        return real_channel(*args, **kwargs)

    monkeypatch.setattr(ray_actor, "ChunkChannel", refused_once)
    monkeypatch.setattr(ray_actor, "RETRY_FIRST_S", 0.2)
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.int64)}, 400, 2)
    client = rc_ray.serve({"t": buf}, name="refused-once", rng=0)
    try:
        writer = client.writer("t", 2, chunk_length=2)
        carried = []
        for t in range(12):
            writer.add_batch({"x": np.full(2, t, np.int64)})
            if t % 2:  # a chunk was sent
                carried.append(type(writer._in_flight[-1]) is ChunkCall)
            if t == 3:
                time.sleep(0.3)  # the retry is due
        writer.close()
        sample = client.sample("t", 64, num_steps=2)
        assert not refusals  # the refusal happened
        assert carried == [False, False, True, True, True, True]
        assert client.info("t").inserts == 24
        # every stored window is two consecutive steps of one row: stored in order
        np.testing.assert_array_equal(sample.data["x"][:, 1], sample.data["x"][:, 0] + 1)
    finally:
        client.close()


def test_a_writer_always_refused_tries_the_socket_a_bounded_number_of_times(monkeypatch) -> None:
    tries: list[float] = []

    def always_refused(*args, **kwargs):
        tries.append(time.monotonic())
        raise ConnectionRefusedError("the chunk listener refused (simulated)")

    monkeypatch.setattr(ray_actor, "ChunkChannel", always_refused)
    monkeypatch.setattr(ray_actor, "RETRY_FIRST_S", 0.01)
    monkeypatch.setattr(ray_actor, "RETRY_LONGEST_S", 0.02)
    monkeypatch.setattr(ray_actor, "RETRY_ATTEMPTS", 3)
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.int64)}, 400, 2)
    client = rc_ray.serve({"t": buf}, name="always-refused", rng=0)
    try:
        writer = client.writer("t", 2, chunk_length=1)
        for t in range(20):
            writer.add_batch({"x": np.full(2, t, np.int64)})
            assert type(writer._in_flight[-1]) is not ChunkCall
            time.sleep(0.03)  # every retry is due by the next chunk
        writer.close()
        assert len(tries) == 1 + 3  # the first connect and RETRY_ATTEMPTS retries, no more
        waits = np.diff(tries)
        assert np.all(waits >= [0.01, 0.02, 0.02])  # doubling, at most RETRY_LONGEST_S
        assert client.info("t").inserts == 40
    finally:
        client.close()
