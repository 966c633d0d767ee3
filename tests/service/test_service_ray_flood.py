"""A Ray shard's chunk socket flooded by 2,000 local peers without the token: the
shard's threads and file descriptors stay near their baseline, a writer opened during
the flood falls back to Ray calls instead of hanging, and one opened after the
handshake deadline writes over the socket again."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np
import pytest
from test_service_channel_flood import connect_peer

import recollect as rc
from recollect.service.channel import HANDSHAKE_TIMEOUT_S

ray = pytest.importorskip("ray")
rc_ray = pytest.importorskip("recollect.ray")
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
            f"{fallback_s:.3f} s (Ray calls), after the deadline {after_deadline_s:.3f} s (socket)"
        )
        assert len(peers) >= 1000
        assert during[0] <= before[0] + 4 and during[1] <= before[1] + 64 + 8
        assert at_deadline[0] <= before[0] + 4 and at_deadline[1] <= before[1] + 8
        assert after[0] <= before[0] + 4 and after[1] <= before[1] + 8
        assert not during_over_socket  # the socket is busy: the chunks went over Ray
        assert after_over_socket  # after the deadline: over the socket again
        assert client.info("t").inserts == 12
    finally:
        client.close()
