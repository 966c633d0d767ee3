"""Writer chunks over a Unix socket (``recollect.ray.channel``), without Ray: what a
chunk sent over the socket stores and raises is what ``Shard.extend`` stores and raises."""

from __future__ import annotations

import ast
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import recollect as rc
from recollect.errors import RateLimiterTimeout, ShapeError, StateError
from recollect.ray.channel import ChunkChannel, ChunkListener
from recollect.ray.channel_wire import recv_frame, send_frame
from recollect.service.shard import Shard
from recollect.service.wire import codec
from recollect.service.wire import requests as rq
from recollect.specs import FlatSpec

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "seq": rc.ArraySpec((), np.int64)}
ENVS, T = 2, 4


def chunk(k: int, length: int = T) -> dict[str, np.ndarray]:
    seq = np.broadcast_to(np.arange(k * length, (k + 1) * length), (ENVS, length)).copy()
    return {"seq": seq, "obs": np.repeat(seq[..., None], 3, -1).astype(np.float32)}


@pytest.fixture
def served():
    shard = Shard("t", rc.ReplayBuffer(SPEC, 400, ENVS))
    listener = ChunkListener(shard)
    lease_id, _rows = shard.reserve(ENVS, socket.gethostname(), 0)
    yield shard, listener, lease_id
    listener.close()


def send(channel: ChunkChannel, lease_id: int, steps: dict, timeout: float | None) -> int:
    """Sends ``steps`` as a writer does: the spec's flat leaves (here already of its dtypes)."""
    return channel.send_request(rq.Extend(lease_id, FlatSpec(SPEC).flatten(steps), timeout))


def answer(channel: ChunkChannel, number: int):
    assert channel.ready(number, 10.0)
    return channel.result(number)


def test_chunks_are_stored_in_the_order_sent_like_a_local_extend(served) -> None:
    shard, listener, lease_id = served
    reference = rc.ReplayBuffer(SPEC, 400, ENVS)
    channel = ChunkChannel(listener.address, listener.token)
    numbers = [send(channel, lease_id, chunk(k), None) for k in range(6)]
    for k in range(6):
        reference.extend(chunk(k), rows=[0, 1])
    # answers read out of order are each chunk's own
    assert [answer(channel, n) for n in reversed(numbers)] == [ENVS * T] * 6
    for row in range(ENVS):
        got, want = shard.buffer.reader.gather_row(row), reference.reader.gather_row(row)
        np.testing.assert_array_equal(got["seq"], np.arange(6 * T))
        np.testing.assert_array_equal(got["obs"], want["obs"])
    channel.close()


def test_a_bad_chunk_raises_the_local_error_and_stores_nothing(served) -> None:
    shard, listener, lease_id = served
    channel = ChunkChannel(listener.address, listener.token)
    bad = {**chunk(0), "obs": np.zeros((ENVS, T, 4), np.float32)}
    number = send(channel, lease_id, bad, None)
    with pytest.raises(ShapeError, match=r"chunk leaf 'obs' must have shape \(2, 4, 3\)"):
        answer(channel, number)
    number = send(channel, lease_id + 1, chunk(0), None)  # a lease the shard never gave
    with pytest.raises(StateError, match="not held"):
        answer(channel, number)
    assert len(shard.buffer) == 0
    assert answer(channel, send(channel, lease_id, chunk(0), None)) == ENVS * T  # still serving
    channel.close()


def test_a_rate_limited_chunk_times_out_on_the_shard() -> None:
    limiter = rc.SampleToInsertRatio(1.0, 2, error_buffer=4.0)
    shard = Shard("t", rc.ReplayBuffer(SPEC, 400, ENVS, rate_limiter=limiter))
    listener = ChunkListener(shard)
    try:
        lease_id, _ = shard.reserve(ENVS, socket.gethostname(), 0)
        channel = ChunkChannel(listener.address, listener.token)
        start = time.monotonic()
        with pytest.raises(RateLimiterTimeout):
            for k in range(20):  # nobody samples: inserts block once the balance is spent
                answer(channel, send(channel, lease_id, chunk(k, 1), 0.05))
        assert time.monotonic() - start < 5.0
    finally:
        listener.close()


def test_a_wrong_token_is_refused_and_the_listener_keeps_serving(served) -> None:
    _shard, listener, lease_id = served
    with pytest.raises((ConnectionError, EOFError, OSError)):
        ChunkChannel(listener.address, bytes(32))
    channel = ChunkChannel(listener.address, listener.token)
    assert answer(channel, send(channel, lease_id, chunk(0), None)) == ENVS * T
    channel.close()


def test_a_chunk_cut_short_by_a_dying_writer_stores_nothing(served) -> None:
    shard, listener, lease_id = served
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(listener.address)

    def frame(payload: bytes) -> bytes:  # multiprocessing.connection's framing
        return struct.pack("!i", len(payload)) + payload

    raw.sendall(frame(listener.token))
    assert raw.recv(16)[4:] == b"ok"
    payload = codec.packed(rq.Extend(lease_id, FlatSpec(SPEC).flatten(chunk(0)), None))
    raw.sendall(frame(payload)[: len(payload) // 2])  # the process dies mid-message
    raw.close()
    time.sleep(0.2)
    assert len(shard.buffer) == 0
    channel = ChunkChannel(listener.address, listener.token)
    assert answer(channel, send(channel, lease_id, chunk(1), None)) == ENVS * T
    np.testing.assert_array_equal(shard.buffer.reader.gather_row(0)["seq"], np.arange(T, 2 * T))
    channel.close()


LISTENER_PROCESS = """
import socket, sys, time
import numpy as np
import recollect as rc
from recollect.ray.channel import ChunkListener
from recollect.service.shard import Shard
spec = {"obs": rc.ArraySpec((3,), np.float32), "seq": rc.ArraySpec((), np.int64)}
shard = Shard("t", rc.ReplayBuffer(spec, 400, 2))
listener = ChunkListener(shard)
lease_id, _ = shard.reserve(2, socket.gethostname(), 0)
print(repr((listener.address, listener.token, lease_id)), flush=True)
time.sleep(600)
"""


def test_a_killed_shard_process_fails_the_writer_at_once_instead_of_hanging() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", LISTENER_PROCESS], stdout=subprocess.PIPE, text=True
    )
    try:
        address, token, lease_id = ast.literal_eval(process.stdout.readline())
        channel = ChunkChannel(address, token)
        assert answer(channel, send(channel, lease_id, chunk(0), None)) == ENVS * T
        process.kill()
        process.wait(10)
        start = time.monotonic()
        with pytest.raises((EOFError, OSError)):
            # the send may still fit in the socket's buffer; the answer never comes
            channel.ready(send(channel, lease_id, chunk(1), None), 30.0)
        assert time.monotonic() - start < 5.0
        with pytest.raises((ConnectionError, EOFError, OSError)):
            ChunkChannel(address, token)
    finally:
        process.kill()


def test_an_error_of_a_type_the_wire_does_not_know_comes_back_as_a_state_error(
    served, monkeypatch
) -> None:
    shard, listener, lease_id = served

    class Unpicklable(Exception):  # a local class: the wire knows it by name only
        pass

    def extend(*args):
        raise Unpicklable("boom")

    monkeypatch.setattr(shard, "extend", extend)
    channel = ChunkChannel(listener.address, listener.token)
    with pytest.raises(StateError, match=r"^the shard raised Unpicklable: boom$"):
        answer(channel, send(channel, lease_id, chunk(0), None))
    monkeypatch.undo()
    assert answer(channel, send(channel, lease_id, chunk(0), None)) == ENVS * T  # still serving
    channel.close()


class _Trickle:
    """A socket stand-in whose ``sendmsg`` takes at most ``step`` bytes a call."""

    def __init__(self, step: int) -> None:
        self.step, self.data = step, bytearray()

    def sendmsg(self, views) -> int:
        room = self.step
        for view in views:
            part = bytes(view[:room])
            self.data += part
            room -= len(part)
            if not room:
                break
        return self.step - room


@pytest.mark.parametrize("step", [1, 3, 8, 1000])
def test_a_frame_the_socket_takes_in_pieces_arrives_whole(step: int) -> None:
    parts = [b"RCW1", memoryview(np.arange(5, dtype=np.float32)), b"", b"xyz"]
    sock = _Trickle(step)
    send_frame(sock, parts)
    payload = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
    assert bytes(sock.data) == struct.pack("!i", len(payload)) + payload
    left, right = socket.socketpair()
    with left, right:
        left.sendall(bytes(sock.data))
        assert recv_frame(right) == payload


def test_frames_of_the_long_header_are_read_and_a_cut_frame_raises_eof() -> None:
    left, right = socket.socketpair()
    with left, right:
        # multiprocessing.connection's header of a frame over 2 GiB: -1, then 8 bytes
        left.sendall(struct.pack("!i", -1) + struct.pack("!Q", 3) + b"abc")
        assert recv_frame(right) == b"abc"
        left.sendall(struct.pack("!i", 10) + b"cut")
        left.close()
        with pytest.raises(EOFError, match="3 bytes into a 10-byte read"):
            recv_frame(right)


def test_answers_that_arrive_together_are_each_read_once(served) -> None:
    _shard, listener, lease_id = served
    channel = ChunkChannel(listener.address, listener.token)
    numbers = [send(channel, lease_id, chunk(k), None) for k in range(5)]
    time.sleep(0.3)  # the five answers wait in the socket: one read takes them all
    assert channel.ready(numbers[-1], 0.0)
    assert [channel.result(n) for n in numbers] == [ENVS * T] * 5
    assert not channel.ready(numbers[-1] + 1, 0.05)  # nothing more came
    channel.close()
