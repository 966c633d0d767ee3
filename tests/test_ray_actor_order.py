"""The shard actor stores a writer's chunks in the order it sent them (no Ray session:
``ShardActor.call`` is driven directly on an asyncio loop, in any arrival order)."""

from __future__ import annotations

import asyncio
import os
import pickle

import numpy as np
import pytest

import recollect as rc
from recollect.errors import StateError
from recollect.service.endpoint import Raised

pytest.importorskip("ray")
from recollect.ray.actor import ShardActor

CHUNK, ENVS = 4, 2


def make_actor() -> ShardActor:
    spec = {"seq": rc.ArraySpec((), np.int64), "obs": rc.ArraySpec((3,), np.float32)}
    config = rc.ReplayBuffer(spec, 400, ENVS).config()
    return ShardActor("t", config, None, 60.0)


def chunk(k: int) -> dict[str, np.ndarray]:
    seq = np.broadcast_to(np.arange(k * CHUNK, (k + 1) * CHUNK), (ENVS, CHUNK)).copy()
    return {"seq": seq, "obs": np.repeat(seq[..., None], 3, -1).astype(np.float32)}


async def call(actor: ShardActor, method: str, *args, seq: int | None = None):
    value = pickle.loads(await actor.call(method, pickle.dumps(args), seq))
    return value


@pytest.mark.parametrize("arrival", [[3, 1, 0, 5, 2, 4], [5, 4, 3, 2, 1, 0]])
def test_chunks_arriving_out_of_order_are_stored_in_sent_order(arrival: list[int]) -> None:
    async def run() -> None:
        actor = make_actor()
        lease, rows = await call(actor, "reserve", ENVS, "host", os.getpid())
        calls = [call(actor, "extend", lease, chunk(k), None, seq=k) for k in arrival]
        written = await asyncio.wait_for(asyncio.gather(*calls), 10)
        assert written == [ENVS * CHUNK] * len(arrival)
        for row in rows:
            stored = actor.shard.buffer.gather_row(int(row))
            np.testing.assert_array_equal(stored["seq"], np.arange(len(arrival) * CHUNK))
            np.testing.assert_array_equal(stored["obs"][:, 2], stored["seq"])

    asyncio.run(run())


def test_chunks_waiting_for_a_released_lease_fail_instead_of_hanging() -> None:
    async def run() -> None:
        actor = make_actor()
        lease, _ = await call(actor, "reserve", ENVS, "host", os.getpid())
        waiting = asyncio.ensure_future(call(actor, "extend", lease, chunk(1), None, seq=1))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # chunk 0 has not arrived
        await call(actor, "release", lease)
        value = await asyncio.wait_for(waiting, 10)
        assert type(value) is Raised and isinstance(value.error, StateError)

    asyncio.run(run())


def test_extend_of_an_unknown_lease_fails_at_once() -> None:
    async def run() -> None:
        value = await asyncio.wait_for(call(make_actor(), "extend", 99, chunk(3), None, seq=3), 10)
        assert type(value) is Raised and isinstance(value.error, StateError)

    asyncio.run(run())
