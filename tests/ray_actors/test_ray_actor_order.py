"""The shard actor stores a writer's chunks in the order it sent them (no Ray session:
``ShardActor.call`` is driven directly from threads, as Ray's, in any arrival order)."""

from __future__ import annotations

import concurrent.futures
import os
import time

import numpy as np
import pytest

import recollect as rc
from recollect.errors import StateError
from recollect.service.wire import codec
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Raised

pytest.importorskip("ray")
from recollect.ray.actor import ShardActor

CHUNK, ENVS = 4, 2


def make_actor() -> ShardActor:
    spec = {"seq": rc.ArraySpec((), np.int64), "obs": rc.ArraySpec((3,), np.float32)}
    config = rc.ReplayBuffer(spec, 400, ENVS).config()
    return ShardActor("t", config, None, 60.0)


def chunk(k: int) -> list[np.ndarray]:
    """Chunk ``k`` as a writer sends it: the flat leaves ``[obs, seq]``."""
    seq = np.broadcast_to(np.arange(k * CHUNK, (k + 1) * CHUNK), (ENVS, CHUNK)).copy()
    return [np.repeat(seq[..., None], 3, -1).astype(np.float32), seq]


#: the requests these tests send, by the names they use
REQUESTS = {"reserve": rq.Reserve, "extend": rq.Extend, "release": rq.Release}


def call(actor: ShardActor, method: str, *args, seq: int | None = None):
    request = REQUESTS[method](*args) if seq is None else rq.Extend(*args, seq=seq)
    return codec.unpack(actor.call(codec.packed(request)))


def arrive(actor: ShardActor, requests: list[tuple]) -> list[concurrent.futures.Future]:
    """Runs each ``(method, *args, seq)`` on its own thread, started in this order."""
    pool = concurrent.futures.ThreadPoolExecutor(len(requests))
    futures = []
    for method, *args, seq in requests:
        futures.append(pool.submit(call, actor, method, *args, seq=seq))
        time.sleep(0.01)  # arrives after the one before
    pool.shutdown(wait=False)
    return futures


@pytest.mark.parametrize("arrival", [[3, 1, 0, 5, 2, 4], [5, 4, 3, 2, 1, 0]])
def test_chunks_arriving_out_of_order_are_stored_in_sent_order(arrival: list[int]) -> None:
    actor = make_actor()
    lease, rows = call(actor, "reserve", ENVS, "host", os.getpid())
    futures = arrive(actor, [("extend", lease, chunk(k), None, k) for k in arrival])
    assert [f.result(10) for f in futures] == [ENVS * CHUNK] * len(arrival)
    for row in rows:
        stored = actor.shard.buffer.reader.gather_row(int(row))
        np.testing.assert_array_equal(stored["seq"], np.arange(len(arrival) * CHUNK))
        np.testing.assert_array_equal(stored["obs"][:, 2], stored["seq"])


def test_chunks_waiting_for_a_released_lease_fail_instead_of_hanging() -> None:
    actor = make_actor()
    lease, _ = call(actor, "reserve", ENVS, "host", os.getpid())
    (waiting,) = arrive(actor, [("extend", lease, chunk(1), None, 1)])
    time.sleep(0.05)
    assert not waiting.done()  # chunk 0 has not arrived
    call(actor, "release", lease)
    value = waiting.result(10)
    assert type(value) is Raised and isinstance(value.error, StateError)


def test_a_chunk_whose_predecessor_never_comes_fails_after_the_turn_timeout() -> None:
    spec = {"seq": rc.ArraySpec((), np.int64), "obs": rc.ArraySpec((3,), np.float32)}
    actor = ShardActor("t", rc.ReplayBuffer(spec, 400, ENVS).config(), None, 0.2)
    lease, _ = call(actor, "reserve", ENVS, "host", os.getpid())
    value = call(actor, "extend", lease, chunk(2), None, seq=2)
    assert type(value) is Raised and isinstance(value.error, StateError)
    assert "waited 1 s for chunk 0" in str(value.error)
    assert call(actor, "extend", lease, chunk(0), None, seq=0) == ENVS * CHUNK  # still in turn


def test_extend_of_an_unknown_lease_fails_at_once() -> None:
    value = call(make_actor(), "extend", 99, chunk(3), None, seq=3)
    assert type(value) is Raised and isinstance(value.error, StateError)
