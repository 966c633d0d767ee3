"""StoredReader: every stored step of a buffer's rows, oldest first, and their ids."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.buffers.stored_reads import StoredReader
from recollect.errors import InvalidArgumentError

SPEC = {"x": rc.ArraySpec((2,), np.int64)}


def reader_over(buf: rc.ReplayBuffer) -> StoredReader:
    return StoredReader(buf.writer.flat_spec, buf.table, buf.storage)


def written(num_envs: int, capacity: int, steps: int) -> rc.ReplayBuffer:
    """Row r's step t holds x = [r, t]."""
    buf = rc.ReplayBuffer(SPEC, capacity=capacity, num_envs=num_envs, rng=0)
    for t in range(steps):
        x = np.stack([np.arange(num_envs), np.full(num_envs, t)], axis=1)
        buf.add_batch({"x": x})
    return buf


@pytest.mark.parametrize("steps", [1, 3, 5, 11])
def test_gather_stored_is_every_row_oldest_first_after_the_ring_wraps(steps):
    buf = written(num_envs=2, capacity=8, steps=steps)  # rows of 4
    x = reader_over(buf).gather_stored()["x"]
    kept = np.arange(max(0, steps - 4), steps)
    assert x.shape == (2, len(kept), 2)
    np.testing.assert_array_equal(x[..., 0], np.repeat([[0], [1]], len(kept), axis=1))
    np.testing.assert_array_equal(x[..., 1], np.broadcast_to(kept, (2, len(kept))))


def test_item_ids_encode_row_and_time_with_the_table_shard():
    buf = written(num_envs=3, capacity=9, steps=5)  # rows of 3: times 2..4
    ids = reader_over(buf).item_ids()
    want = rc.ids.encode(np.arange(3)[:, None], np.arange(2, 5)[None, :])
    np.testing.assert_array_equal(ids, want)
    assert ids.dtype == np.int64


def test_uneven_rows_raise_and_gather_row_reads_one_row():
    buf = written(num_envs=2, capacity=8, steps=2)
    buf.add_batch({"x": np.array([[0, 2]])}, rows=[0])
    reader = reader_over(buf)
    with pytest.raises(
        InvalidArgumentError, match=r"rows hold different numbers of steps \(\[3, 2\]\).*gather_row"
    ):
        reader.gather_stored()
    with pytest.raises(
        InvalidArgumentError, match=r"different numbers of steps.*recollect.ids.encode"
    ):
        reader.item_ids()
    np.testing.assert_array_equal(reader.gather_row(0)["x"][:, 1], [0, 1, 2])
    np.testing.assert_array_equal(reader.gather_row(1)["x"][:, 1], [0, 1])
