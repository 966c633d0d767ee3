"""The chunk socket of a shard under a flood of peers without the token
(``recollect.ray.channel``, no Ray): handshakes are read with a hard deadline on
their bytes, pending handshakes are bounded, the accept loop outlives running out of
file descriptors, and a writer's connect gives up instead of hanging.

The listener runs in a child process that reports its threads and open file
descriptors (``/proc/self/fd``), so the flood's own sockets are not counted.
"""

from __future__ import annotations

import ast
import contextlib
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from recollect.ray.channel import ChunkChannel
from recollect.service.wire import requests as rq

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts /proc/self/fd")

HANDSHAKE_S = 1.0
SPEC_ENVS = 2

LISTENER = """
import os, resource, socket, sys, threading
import numpy as np
import recollect as rc
from recollect.ray.channel import ChunkListener
from recollect.service.shard import Shard
spare_fds = int(sys.argv[1])
shard = Shard("t", rc.ReplayBuffer({"x": rc.ArraySpec((), np.int64)}, 400, 2))
listener = ChunkListener(shard, handshake_timeout=float(sys.argv[2]))
lease_id, _ = shard.reserve(2, socket.gethostname(), 0)

def stats():
    return threading.active_count(), len(os.listdir("/proc/self/fd")) - 1  # less listdir's own

if spare_fds:  # descriptors run out after a few more connections
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (stats()[1] + spare_fds, hard))
print(repr((listener.address, listener.token, lease_id)), flush=True)
for line in sys.stdin:
    print(repr(stats() + (len(shard.buffer),)), flush=True)
"""


class Listener:
    """The listener's child process: ``stats()`` is ``(threads, fds, steps stored)``."""

    def __init__(self, spare_fds: int = 0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", LISTENER, str(spare_fds), str(HANDSHAKE_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.address, self.token, self.lease_id = ast.literal_eval(self.process.stdout.readline())

    def stats(self) -> tuple[int, int, int]:
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return ast.literal_eval(self.process.stdout.readline())

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)


@pytest.fixture
def listener():
    served = Listener()
    yield served
    served.close()


def flood(address: str, count: int, limit_s: float) -> list[socket.socket]:
    """``count`` peers without the token: every other one idle, the rest send 1 of the 4
    frame-header bytes. Bounded: each connect waits 1 s at most, the flood ``limit_s``."""
    peers = []
    end = time.monotonic() + limit_s
    for k in range(count):
        if time.monotonic() > end:
            break
        peer = connect_peer(address)
        if peer is not None:
            if k % 2:
                with contextlib.suppress(OSError):  # the listener may have closed it already
                    peer.send(b"\0")
            peers.append(peer)
    return peers


def connect_peer(address: str, limit_s: float = 1.0) -> socket.socket | None:
    """A socket connected to ``address`` (retried while the listen queue is full, for
    ``limit_s`` at most), or None."""
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.settimeout(limit_s)
    end = time.monotonic() + limit_s
    while True:
        try:
            peer.connect(address)
            return peer
        except BlockingIOError:  # the queue is full: the listener is behind
            if time.monotonic() > end:
                break
            time.sleep(0.001)
        except OSError:  # refused: the listener is gone
            break
    peer.close()
    return None


def closed_by_listener(peer: socket.socket) -> bool:
    peer.setblocking(False)
    try:
        return peer.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def new_writer(served: Listener, limit_s: float = 30.0) -> tuple[float, object]:
    """Seconds until a writer with the token connected and stored a chunk (or the error);
    run on a thread, so a listener that stopped accepting fails the test, not hangs it."""
    outcome: list = []

    def write() -> None:
        start = time.monotonic()
        try:
            channel = ChunkChannel(served.address, served.token)
            leaves = [np.zeros((SPEC_ENVS, 3), np.int64)]  # the spec's one leaf "x"
            number = channel.send_request(rq.Extend(served.lease_id, leaves, None))
            assert channel.ready(number, limit_s)
            outcome.append((time.monotonic() - start, channel.result(number)))
            channel.close()
        except Exception as err:
            outcome.append((time.monotonic() - start, err))

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(limit_s)
    return outcome[0] if outcome else (limit_s, TimeoutError("the writer hung"))


@pytest.mark.slow  # about 3 s (a flood of peers): runs with CI=true / --run-slow
def test_a_flood_of_idle_and_one_byte_peers_holds_no_thread_and_ends_at_its_deadline(
    listener,
) -> None:
    threads0, fds0, _ = listener.stats()
    peers = flood(listener.address, 2000, limit_s=60.0)
    flooded = time.monotonic()
    try:
        threads1, fds1, _ = listener.stats()
        # the handshake deadline closes every peer that did not send the token
        deadline = flooded + HANDSHAKE_S
        time.sleep(max(deadline - time.monotonic(), 0.0) + 0.2)
        threads2, fds2, _ = listener.stats()
        dropped = sum(closed_by_listener(p) for p in peers)
        took, answer = new_writer(listener)
    finally:
        for peer in peers:
            peer.close()
    time.sleep(0.2)
    threads3, fds3, stored = listener.stats()
    print(
        f"\n{len(peers)} peers: threads {threads0} -> {threads1} (flood) -> {threads2} "
        f"(deadline) -> {threads3} (after); fds {fds0} -> {fds1} -> {fds2} -> {fds3}; "
        f"new writer {took:.3f} s after the deadline"
    )
    assert len(peers) >= 1000
    assert answer == 2 * 3, answer  # the writer's chunk was stored
    assert stored == 6
    assert threads1 <= threads0 + 1  # one handshake thread for all, no thread per peer
    assert fds1 <= fds0 + 64 + 2  # at most max_pending connections wait
    assert dropped == len(peers)  # every peer without the token was closed
    assert threads2 <= threads0 + 1 and fds2 <= fds0 + 2
    assert threads3 <= threads0 + 1 and fds3 <= fds0 + 1


@pytest.mark.slow  # about 14 s on 2 cores: runs with CI=true / --run-slow
def test_the_listener_keeps_accepting_after_file_descriptors_ran_out() -> None:
    served = Listener(spare_fds=16)  # fewer than max_pending: accept() fails with EMFILE
    try:
        threads0, fds0, _ = served.stats()
        peers = flood(served.address, 300, limit_s=30.0)
        time.sleep(HANDSHAKE_S + 0.2)
        for peer in peers:
            peer.close()
        took, answer = new_writer(served)
        threads1, fds1, stored = served.stats()
        print(
            f"\n{len(peers)} peers with 16 spare fds: threads {threads0} -> {threads1}, "
            f"fds {fds0} -> {fds1}; new writer after {took:.3f} s"
        )
        assert answer == 2 * 3, answer
        assert stored == 6
    finally:
        served.close()


def test_a_peer_sending_the_token_byte_by_byte_within_the_deadline_is_accepted(listener) -> None:
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(listener.address)
    for byte in (len(listener.token)).to_bytes(4, "big") + listener.token:
        raw.send(bytes([byte]))
        time.sleep(0.005)
    raw.settimeout(10.0)
    assert raw.recv(6) == b"\0\0\0\x02ok"
    raw.close()


def test_a_peer_sending_anything_but_the_token_frame_is_closed_at_once(listener) -> None:
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(listener.address)
    raw.send(b"GET / HTTP/1.1\r\n\r\n")
    raw.settimeout(HANDSHAKE_S / 2)  # before the deadline could have closed it
    assert raw.recv(16) == b""
    raw.close()


def test_a_writer_gives_up_on_a_listener_whose_queue_is_full_instead_of_hanging() -> None:
    address = "\0recollect-test-full-queue"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(0)  # never accepts
    queued = []
    try:
        for _ in range(64):  # fill the listen queue
            peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            peer.setblocking(False)
            try:
                peer.connect(address)
            except BlockingIOError:
                peer.close()
                break
            queued.append(peer)
        outcome: list = []

        def connect() -> None:
            try:
                ChunkChannel(address, bytes(32), timeout=0.5)
            except Exception as err:
                outcome.append(err)

        thread = threading.Thread(target=connect, daemon=True)
        thread.start()
        thread.join(20.0)
        assert outcome, "the writer hung on a full listen queue"
        assert isinstance(outcome[0], TimeoutError)
    finally:
        for peer in queued:
            peer.close()
        server.close()


def test_a_writer_gives_up_on_a_listener_that_never_answers() -> None:
    address = "\0recollect-test-silent"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(8)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"did not accept within 0\.3 s"):
            ChunkChannel(address, bytes(32), timeout=0.3)
        assert time.monotonic() - start < 10.0
    finally:
        server.close()


def test_a_writer_gets_the_socket_while_a_peer_without_the_token_holds_every_slot(
    listener,
) -> None:
    """One peer's 64 idle connections (the default ``max_pending``) take every handshake
    slot; a writer that connects after them takes the slot of the oldest."""
    peers = [connect_peer(listener.address) for _ in range(64)]
    try:
        assert all(peer is not None for peer in peers)
        time.sleep(0.2)  # the listener accepted them all; older than the eviction grace
        took, answer = new_writer(listener)
        assert answer == 2 * 3, answer  # accepted (not refused), and the chunk was stored
        assert took < HANDSHAKE_S  # did not wait for the peers' deadline
        assert closed_by_listener(peers[0])  # the oldest peer gave its slot up
        assert not closed_by_listener(peers[-1])  # the newest keeps its slot
    finally:
        for peer in peers:
            if peer is not None:
                peer.close()


def test_a_burst_of_200_writers_connecting_at_once_is_all_accepted(listener) -> None:
    """200 writers (more than ``max_pending``) connect at once: those beyond the free slots
    wait in the listen queue, none is refused."""
    outcomes: list = []
    start = threading.Barrier(200, timeout=30.0)

    def connect() -> None:
        try:
            start.wait()
            channel = ChunkChannel(listener.address, listener.token)
            outcomes.append(None)
            time.sleep(0.5)  # every connection is open at once
            channel.close()
        except Exception as err:
            outcomes.append(err)

    threads = [threading.Thread(target=connect, daemon=True) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30.0)
    refused = [err for err in outcomes if err is not None]
    print(f"\n200 writers at once: {len(refused)} refused")
    assert len(outcomes) == 200, "a writer hung"
    assert refused == []
