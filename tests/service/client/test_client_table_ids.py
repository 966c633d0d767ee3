"""Ids carry their table: the ids a service's table returns name shards of that table
only (the shards of all tables are numbered one after another), so ids of another
table passed to ``update_priorities`` are skipped, never reweight this table."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError
from recollect.service import Server

SPEC = {"x": rc.ArraySpec((), np.float32)}
ENVS = 4


def table() -> rc.ReplayBuffer:
    return rc.ReplayBuffer(SPEC, 64 * ENVS, ENVS, sequence_length=1, sampler=rc.Prioritized())


def served(num_shards: int):
    server = Server({"t": table(), "u": table()}, num_shards=num_shards)
    client = server.client(rng=0)
    for name in ("t", "u"):
        for _ in range(num_shards):
            with client.writer(name, ENVS // num_shards) as writer:
                for k in range(16):
                    writer.add_batch({"x": np.full(ENVS // num_shards, k, np.float32)})
    return server, client


@pytest.mark.parametrize("num_shards", [1, 2])
def test_ids_of_another_table_are_skipped_and_change_nothing(num_shards: int) -> None:
    server, client = served(num_shards)
    try:
        ids_t = np.unique(client.sample("t", 64).ids)
        ids_u = np.unique(client.sample("u", 64).ids)
        assert not np.isin(ids_u, ids_t).any()  # same geometry, yet no id in common
        shards, _, _ = rc.ids.decode(np.concatenate([ids_t, ids_u]))
        assert set(shards[: len(ids_t)]) <= set(range(num_shards))
        assert set(shards[len(ids_t) :]) <= set(range(num_shards, 2 * num_shards))
        big = np.full(len(ids_u), 1e6)
        assert client.update_priorities("t", ids_u, big, wait=True) == len(ids_u)
        client.update_priorities("t", ids_u, big)  # held back: skipped on the shard too
        drawn = client.sample("t", 512).ids
        assert not np.isin(drawn, ids_u).any()
        counts = np.unique(drawn, return_counts=True)[1]
        assert counts.max() < 64  # still about uniform over 64 windows, nothing reweighted
        # the table's own ids work, tagged or not
        assert client.update_priorities("u", ids_u[:1], [1e6], wait=True) == 0
        assert (client.sample("u", 64).ids == ids_u[0]).mean() > 0.9
    finally:
        server.close()


def test_a_service_holds_at_most_256_shards_over_its_tables() -> None:
    with pytest.raises(InvalidArgumentError, match="at most 256 shards over all its tables"):
        Server(
            {n: rc.ReplayBuffer(SPEC, 2 * 130, 130) for n in ("t", "u")}, num_shards=130
        ).client()
