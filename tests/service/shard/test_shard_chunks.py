"""A writer's chunk travels as its flat, already-cast leaves: the shard checks their dtypes
and shapes and block-writes them (no unflatten, flatten or cast), and the write returns its
count (issue 37, item 2)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
import recollect.buffers.writes as writes
import recollect.specs as specs
from recollect.errors import DTypeError, ShapeError, SpecError
from recollect.service import Server, Shard

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "seq": rc.ArraySpec((), np.int64)}
ENVS = 2


def leaves(first: int, steps: int, rows: int = ENVS) -> list[np.ndarray]:
    """A chunk as a writer sends it: ``[obs, seq]`` (the spec's flat order), ``[rows, steps]``."""
    seq = np.broadcast_to(np.arange(first, first + steps), (rows, steps)).copy()
    return [np.repeat(seq[..., None], 3, -1).astype(np.float32), seq]


def as_steps(chunk: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {"obs": chunk[0], "seq": chunk[1]}


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6))
def test_chunks_store_what_a_local_extend_of_the_same_steps_stores(lengths: list[int]) -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 32, ENVS))
    reference = rc.ReplayBuffer(SPEC, 32, ENVS)
    lease, rows = shard.reserve(ENVS, "host", os.getpid())
    first = 0
    for n in lengths:
        chunk = leaves(first, n)
        assert shard.extend(lease, chunk, None) == ENVS * n  # the write's own count
        reference.extend(as_steps(chunk), rows=rows)
        first += n
    assert shard.buffer.table.inserts == reference.table.inserts
    for row in range(ENVS):
        got, want = shard.buffer.reader.gather_row(row), reference.reader.gather_row(row)
        for key in SPEC:
            np.testing.assert_array_equal(got[key], want[key])


@pytest.mark.parametrize(
    ("chunk", "error", "message"),
    [
        (
            as_steps(leaves(0, 4)),
            SpecError,
            r"a chunk must be a list of 2 arrays, one per leaf of the spec in its flat order "
            r"\['obs', 'seq'\]; got dict",
        ),
        (
            leaves(0, 4)[:1],
            SpecError,
            r"must be a list of 2 arrays.*; got list of 1\. A writer must send the spec's flat",
        ),
        (
            [leaves(0, 4)[0].astype(np.float64), leaves(0, 4)[1]],
            DTypeError,
            r"chunk leaf 'obs' must have dtype float32 \(the shard casts nothing\); got float64",
        ),
        (
            [leaves(0, 4)[0][..., :2], leaves(0, 4)[1]],
            ShapeError,
            r"chunk leaf 'obs' must have shape \(2, 4, 3\) \(\[rows of the lease=2, steps=4, "
            r"\*leaf shape\]\); got \(2, 4, 2\)",
        ),
        (
            [leaves(0, 4)[0], leaves(0, 3)[1]],
            ShapeError,
            r"chunk leaf 'seq' must have shape \(2, 4\) .*; got \(2, 3\)",
        ),
        (
            leaves(0, 4, rows=3),
            ShapeError,
            r"chunk leaf 'obs' must have shape \(2, 4, 3\) .*; got \(3, 4, 3\)",
        ),
        (
            [leaves(0, 4)[0], leaves(0, 4)[1].tolist()],
            SpecError,
            r"chunk leaf 'seq' must be a numpy\.ndarray; got list",
        ),
        (
            [np.zeros(3, np.float32), leaves(0, 4)[1]],
            ShapeError,
            r"chunk leaf 'obs' must have shape \(2, 0, 3\)",
        ),
    ],
    ids=["nest", "too-few", "dtype", "shape", "steps", "rows", "not-array", "no-steps-dim"],
)
def test_a_chunk_not_of_the_spec_is_refused_naming_the_leaf_and_writes_nothing(
    chunk, error, message
) -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 32, ENVS))
    lease, _ = shard.reserve(ENVS, "host", os.getpid())
    with pytest.raises(error, match=message):
        shard.extend(lease, chunk, None, 0)
    assert len(shard.buffer) == 0 and shard.buffer.table.inserts == 0
    assert shard.extend(lease, leaves(0, 4), None, 1) == ENVS * 4  # the lease goes on


def test_a_served_chunk_is_neither_unflattened_nor_flattened_nor_cast(monkeypatch) -> None:
    calls: list[str] = []

    def spy(name: str, real):
        def call(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        return call

    server = Server({"t": rc.ReplayBuffer(SPEC, 64, ENVS)})
    writer = server.client().writer("t", ENVS, chunk_length=4)
    for t in range(6):  # one full chunk and a part of one (sent by flush)
        writer.add_batch({"obs": np.full((ENVS, 3), t, np.float32), "seq": np.full(ENVS, t)})
    monkeypatch.setattr(specs.FlatSpec, "unflatten", spy("unflatten", specs.FlatSpec.unflatten))
    monkeypatch.setattr(specs.FlatSpec, "flatten", spy("flatten", specs.FlatSpec.flatten))
    monkeypatch.setattr(writes, "convert_step", spy("convert_step", writes.convert_step))
    monkeypatch.setattr(writes, "check_structure", spy("check_structure", writes.check_structure))
    writer.flush()
    assert calls == []
    stored = server.shards["t"][0].buffer.reader.gather_row(0)
    np.testing.assert_array_equal(stored["seq"], np.arange(6))
    np.testing.assert_array_equal(stored["obs"][:, 0], np.arange(6, dtype=np.float32))


def test_write_leaves_of_a_block_writes_t_steps_per_row_also_step_by_step() -> None:
    limited = rc.ReplayBuffer(SPEC, 32, ENVS, rate_limiter=rc.MinSize(1))  # the step path
    plain = rc.ReplayBuffer(SPEC, 32, ENVS)  # the block path
    for buf in (limited, plain):
        buf.writer.write_leaves(leaves(0, 5), np.arange(ENVS), block=True)
        buf.writer.write_leaves(leaves(5, 0), None, block=True)
        buf.writer.write_leaves([leaf[:, 0] for leaf in leaves(5, 1)])
        assert buf.table.inserts == ENVS * 6
        np.testing.assert_array_equal(buf.reader.gather_row(1)["seq"], np.arange(6))
