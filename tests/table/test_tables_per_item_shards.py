"""Per-item max_times_sampled and deletes over 1 and 4 shards, against tests/reference.py.

Reverb's semantics, checked through a served table (embedded Server, no Ray):
each item of a batch is one selection, a window reaching ``max_times_sampled``
is removed before the next selection of the batch, and ``Client.delete``
removes windows on the shard encoded in each id, skipping stale and unknown
ids. Each shard is modelled by a :class:`ReferenceTable` of its own rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import recollect as rc
from recollect import ids as id_layout
from recollect.service import Server
from reference import ReferenceTable

SPEC = {"x": rc.ArraySpec((), np.int64)}
ROWS_PER_SHARD, MAX_LENGTH = 2, 5


class ShardedTableMachine(RuleBasedStateMachine):
    """Writes to single shards, samples and deletes through a client."""

    @initialize(
        num_shards=st.sampled_from([1, 4]),
        kind=st.sampled_from(["uniform", "prioritized", "fifo", "lifo"]),
        max_times=st.integers(0, 3),
    )
    def setup(self, num_shards: int, kind: str, max_times: int) -> None:
        if kind in ("fifo", "lifo"):
            num_shards = 1  # deterministic selectors are served in one shard
        sampler = {
            "uniform": rc.Uniform,
            "prioritized": rc.Prioritized,
            "fifo": rc.Fifo,
            "lifo": rc.Lifo,
        }[kind]()
        rows = ROWS_PER_SHARD * num_shards
        buf = rc.ReplayBuffer(
            SPEC,
            rows * MAX_LENGTH,
            rows,
            sampler=sampler,
            max_times_sampled=max_times,
            sequence_length=1,
        )
        self.kind, self.num_shards = kind, num_shards
        self.server = Server({"t": buf}, num_shards=num_shards)
        self.client = self.server.client(rng=0)
        self.refs = [
            ReferenceTable(ROWS_PER_SHARD, MAX_LENGTH, 1, max_times) for _ in range(num_shards)
        ]

    def teardown(self) -> None:
        if hasattr(self, "server"):
            self.server.close()

    @rule(data=st.data())
    def add(self, data: st.DataObject) -> None:
        s = data.draw(st.integers(0, self.num_shards - 1))
        ref = self.refs[s]
        x = np.array([(s * 10 + r) * 10_000 + ref.t[r] for r in range(ROWS_PER_SHARD)])
        self.server.shards["t"][s].buffer.add_batch({"x": x})
        for r in range(ROWS_PER_SHARD):
            ref.add(r, False)

    @rule(batch=st.integers(1, 6))
    def sample(self, batch: int) -> None:
        valid = [len(ref.valid()) for ref in self.refs]
        if not sum(valid):
            with pytest.raises(rc.errors.NotEnoughDataError):
                self.client.sample("t", batch, timeout=0)
            return
        limited = self.refs[0].max_times
        if limited and any(0 < ref.allowance() < batch for ref in self.refs):
            return  # the random split may ask a shard for more than it allows
        sample = self.client.sample("t", batch)
        shard, rows, times = id_layout.decode(sample.ids)
        x = (shard * 10 + rows) * 10_000 + times
        np.testing.assert_array_equal(sample.data["x"], x)
        assert sample.table_size == sum(valid)
        assert np.isfinite(sample.probabilities).all() and (sample.probabilities > 0).all()
        counts = sample.times_sampled if limited else np.zeros(batch, np.int32)
        for s, r, t, count in zip(shard, rows, times, counts, strict=True):
            ref, window = self.refs[s], (int(r), int(t))
            if self.kind in ("fifo", "lifo"):  # one selection per item: the first window
                assert window == ref.ordered(self.kind)[0]
            ref.take(window)
            assert not limited or count == ref.counts[window]

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        candidates = [
            (s, r, t)
            for s, ref in enumerate(self.refs)
            for r in range(ROWS_PER_SHARD)
            for t in range(max(0, ref.t[r] - MAX_LENGTH - 1), ref.t[r] + 2)
        ]
        chosen = data.draw(st.lists(st.sampled_from(candidates), max_size=5, unique=True))
        foreign = data.draw(st.booleans())  # an id of no shard of this table
        ids = [int(id_layout.encode(r, t, s)) for s, r, t in chosen]
        ids += [int(id_layout.encode(0, 0, 9))] * foreign
        expected = sum(not self.refs[s].delete((r, t)) for s, r, t in chosen) + foreign
        before = self.client.info("t").deletes
        assert self.client.delete("t", np.array(ids, np.int64)) == expected
        assert self.client.info("t").deletes == before + len(ids) - expected

    @invariant()
    def sizes_match(self) -> None:
        if hasattr(self, "client"):
            info = self.client.info("t")
            assert info.size == sum(len(ref.valid()) for ref in self.refs)


TestShardedTableMachine = ShardedTableMachine.TestCase
TestShardedTableMachine.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
