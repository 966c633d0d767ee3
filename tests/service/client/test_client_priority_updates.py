"""Priority updates over a served table: every ``update_priorities`` call is checked
when it is made, also when it is held back, so a bad call raises there (naming its own
positions) and never takes another call's update down with it; its errors are the
local buffer's (type and message), over one shard or several."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError
from recollect.service import Server

SPEC = {"x": rc.ArraySpec((), np.float32)}
ENVS = 4


def prioritized(priority_exponent: float = 0.6) -> rc.ReplayBuffer:
    return rc.ReplayBuffer(
        SPEC,
        64 * ENVS,
        ENVS,
        sequence_length=1,
        sampler=rc.Prioritized(priority_exponent=priority_exponent),
    )


def served(num_shards: int, buffer: rc.ReplayBuffer | None = None):
    server = Server({"t": buffer if buffer is not None else prioritized()}, num_shards=num_shards)
    client = server.client(rng=0)
    for _ in range(num_shards):
        with client.writer("t", ENVS // num_shards) as writer:
            for k in range(16):
                writer.add_batch({"x": np.full(ENVS // num_shards, k, np.float32)})
    return server, client


def priorities_of(client, ids: np.ndarray) -> np.ndarray:
    """The priorities the table holds for ``ids`` (from draws that hit them)."""
    found = {}
    for _ in range(200):
        s = client.sample("t", 64)
        found.update(zip(s.ids.tolist(), s.priorities.tolist(), strict=True))
        if all(int(i) in found for i in ids):
            break
    return np.array([found[int(i)] for i in ids])


@pytest.mark.parametrize("num_shards", [1, 2])
def test_a_bad_update_raises_at_its_call_and_the_good_one_held_back_is_applied(
    num_shards: int,
) -> None:
    server, client = served(num_shards)
    try:
        ids = client.sample("t", 8).ids
        good, bad = ids[:2], ids[2:5]
        client.update_priorities("t", good, [7.0, 7.0])  # held back
        with pytest.raises(InvalidArgumentError, match=r"got nan at position 1 \(1 bad value"):
            client.update_priorities("t", bad, [1.0, np.nan, 1.0])
        client.sample("t", 4)  # no error: the good update went along and was applied
        np.testing.assert_array_equal(priorities_of(client, good), [7.0, 7.0])
    finally:
        server.close()


def test_held_back_calls_are_applied_one_by_one_when_together_they_fail() -> None:
    # each call passes the checks made on the client; the second overflows the shard's
    # sum tree ((p + epsilon) ** alpha = inf), which only the shard can tell
    server, client = served(1, prioritized(priority_exponent=2.0))
    try:
        ids = client.sample("t", 8).ids
        client.update_priorities("t", ids[:2], [7.0, 7.0])
        client.update_priorities("t", ids[2:4], [1.0, 1e300])
        with pytest.raises(InvalidArgumentError) as raised:
            client.sample("t", 4)  # the held-back updates go along and the bad one fails
        with pytest.raises(InvalidArgumentError) as local:
            buffer = prioritized(priority_exponent=2.0)
            buffer.add_batch({"x": np.zeros(ENVS, np.float32)})
            buffer.add_batch({"x": np.zeros(ENVS, np.float32)})
            buffer.update_priorities(buffer.sample(2).ids, [1.0, 1e300])
        assert str(raised.value) == str(local.value)
        np.testing.assert_array_equal(priorities_of(client, ids[:2]), [7.0, 7.0])
    finally:
        server.close()


def local_and_served(num_shards: int, call, buffer_factory=prioritized):
    """``call(update_priorities, ids)`` on a local buffer and on the served table (waited
    for and held back), each with ids sampled from it; returns the outcomes."""
    local = buffer_factory()
    for k in range(16):
        local.add_batch({"x": np.full(ENVS, k, np.float32)})
    server, client = served(num_shards, buffer_factory())
    outcomes = []
    try:
        for update, ids in [
            (local.update_priorities, local.sample(4).ids),
            (
                lambda i, p: client.update_priorities("t", i, p, wait=True),
                client.sample("t", 4).ids,
            ),
            (lambda i, p: client.update_priorities("t", i, p), client.sample("t", 4).ids),
        ]:
            try:
                outcomes.append(("returned", call(update, ids)))
            except Exception as err:
                outcomes.append((type(err), str(err)))
    finally:
        server.close()
    return outcomes


CASES = {
    "length mismatch": lambda update, ids: update(ids, [1.0] * (len(ids) + 1)),
    "2-D ids": lambda update, ids: update(ids.reshape(2, 2), np.ones((2, 2))),
    "float ids": lambda update, ids: update(ids.astype(np.float64), np.ones(len(ids))),
    "negative priority": lambda update, ids: update(ids, [1.0, -1.0, 1.0, 1.0]),
}


@pytest.mark.parametrize("num_shards", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_served_update_errors_are_the_local_ones(num_shards: int, case: str) -> None:
    local, waited, held = local_and_served(num_shards, CASES[case])
    assert local[0] is InvalidArgumentError, local
    assert waited == local
    assert held == local


@pytest.mark.parametrize("num_shards", [1, 2])
def test_negative_ids_are_skipped_as_by_a_local_buffer(num_shards: int) -> None:
    def negative(update, ids):
        return update(np.array([-1, -(2**40), *ids[:2]]), np.ones(4))

    local, waited, held = local_and_served(num_shards, negative)
    assert local == ("returned", 2)
    assert waited == ("returned", 2)
    assert held == ("returned", None)


@pytest.mark.parametrize("num_shards", [1, 2])
def test_a_table_without_priorities_raises_the_local_error(num_shards: int) -> None:
    def uniform() -> rc.ReplayBuffer:
        return rc.ReplayBuffer(SPEC, 64 * ENVS, ENVS, sequence_length=1)

    outcomes = local_and_served(num_shards, CASES["length mismatch"], uniform)
    assert outcomes[0][0] is InvalidArgumentError and "has no priorities" in outcomes[0][1]
    assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0]
