"""Cold reads of compressed values on disk (issue 41): a read asks the OS for every
value's pages at once (``madvise(MADV_WILLNEED)`` over sorted, coalesced extents)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from frame_stacks import StackingEnvs, check_sample
from recollect.storage.arena import PAGE
from recollect.storage.disk_arena import PREFETCH_GAP, extents

values = st.lists(
    st.tuples(st.integers(0, 60 * PAGE), st.integers(1, 3 * PAGE)), min_size=0, max_size=40
)


@settings(max_examples=200, deadline=None)
@given(values=values, gap=st.sampled_from([0, PAGE, PREFETCH_GAP]))
def test_extents_cover_every_value_sorted_aligned_and_coalesced(values, gap):
    offsets = np.array([o for o, _ in values], np.int64)
    lengths = np.array([n for _, n in values], np.int64)
    starts, sizes = extents(offsets, lengths, gap)
    assert starts.dtype == np.int64 and len(starts) == len(sizes) <= len(values)
    assert np.all(starts % PAGE == 0) and np.all(sizes > 0)
    ends = starts + sizes
    assert np.all(starts[1:] > ends[:-1] + gap)  # sorted, apart by more than the gap
    for o, n in values:  # each value inside one extent
        inside = (starts <= o) & (o + n <= ends)
        assert inside.sum() == 1, (o, n)
    # no extent reads past the values it covers: it ends at a value's end
    assert set(ends.tolist()) <= {o + n for o, n in values}
    assert set(starts.tolist()) <= {o - o % PAGE for o, _ in values}


def test_a_sample_asks_for_every_decoded_value_before_decoding_it(tmp_path):
    """Every frame a sample decodes lies inside one WILLNEED range asked for before the
    decode; the sample still equals what the env produced."""
    spec = {
        "observation": rc.ArraySpec((6, 5, 4), np.uint8),
        "action": rc.ArraySpec((), np.int32),
        "is_last": rc.ArraySpec((), bool),
    }
    buf = rc.ReplayBuffer(
        spec, 3 * 64, 3, rng=0, storage="memmap", directory=tmp_path / "buf",
        sampler=rc.Prioritized(), sequence_length=2,
        frame_stacks={"observation": rc.FrameStack(4, axis=-1)},
        compression={"observation": "zstd"},
    )  # fmt: skip
    envs = StackingEnvs(3, (6, 5), np.uint8, 4, -1, "reset", 1, 0.1)
    recorded = {}
    for t in range(100):
        obs, _, is_last = envs.step()
        now = buf.table.index.t
        for e in range(3):
            recorded[int(rc.ids.encode(e, int(now[e])))] = obs[e]
        buf.add_batch({"observation": obs, "action": np.full(3, t, np.int32), "is_last": is_last})
    (ring,) = buf.storage.compressed_rings().values()
    store = ring.slots
    arena = store.arena
    asked: list[tuple[int, int, int]] = []
    decoded: list[tuple[np.ndarray, np.ndarray]] = []
    advise = arena._advise
    assert advise is not None  # Linux: numpy's memmap has its mmap object

    def record(option, start, size):
        asked.append((option, start, size))
        return advise(option, start, size)

    arena._advise = record
    codec = store._index.codec
    decode_into = codec.decode_into

    def seen(data, offsets, lengths, out):
        assert asked, "decoded before any read-ahead was asked for"
        decoded.append((offsets.copy(), lengths.copy()))
        return decode_into(data, offsets, lengths, out)

    codec.decode_into = seen
    check_sample(buf, recorded, 16, 2)
    assert decoded and all(option == mmap.MADV_WILLNEED for option, _, _ in asked)
    for offsets, lengths in decoded:
        for o, n in zip(offsets.tolist(), lengths.tolist(), strict=True):
            assert any(s <= o and o + n <= s + size for _, s, size in asked), (o, n)
    buf.close()


@pytest.mark.parametrize("count", [0, 1])
def test_extents_of_none_or_one_value(count):
    offsets = np.array([5 * PAGE + 7][:count], np.int64)
    starts, sizes = extents(offsets, np.array([100][:count], np.int64))
    np.testing.assert_array_equal(starts, [5 * PAGE][:count])
    np.testing.assert_array_equal(sizes, [107][:count])


def test_a_sample_reads_ahead_the_leaf_rows_and_index_entries_it_gathers(tmp_path, monkeypatch):
    """Files of PREFETCH_MIN_FILE or more (0 here): a sample asks for the gathered items of
    each leaf file and for the index entries of the frames it decodes."""
    from recollect.storage import disk_arena, memmap

    monkeypatch.setattr(disk_arena, "PREFETCH_MIN_FILE", 0)
    monkeypatch.setattr(memmap, "PREFETCH_MIN_FILE", 0)
    asked: list[tuple[object, int, int]] = []
    real = disk_arena.willneed

    def record(advise, starts, sizes):
        asked.extend((advise.__self__, s, n) for s, n in zip(starts, sizes, strict=True))
        real(advise, starts, sizes)

    monkeypatch.setattr(disk_arena, "willneed", record)
    spec = {
        "observation": rc.ArraySpec((6, 5, 4), np.uint8),
        "action": rc.ArraySpec((3,), np.int64),
        "is_last": rc.ArraySpec((), bool),
    }
    buf = rc.ReplayBuffer(
        spec, 2 * 5000, 2, rng=0, storage="memmap", directory=tmp_path / "buf",
        sampler=rc.Prioritized(), sequence_length=2,
        frame_stacks={"observation": rc.FrameStack(4, axis=-1)},
        compression={"observation": "zstd"},
    )  # fmt: skip
    envs = StackingEnvs(2, (6, 5), np.uint8, 4, -1, "reset", 2, 0.05)
    recorded = {}
    for t in range(6000):  # wraps: slots differ from times
        obs, _, is_last = envs.step()
        now = buf.table.index.t
        for e in range(2):
            recorded[int(rc.ids.encode(e, int(now[e])))] = obs[e]
        action = np.full((2, 3), t, np.int64)
        buf.add_batch({"observation": obs, "action": action, "is_last": is_last})
    asked.clear()
    s = check_sample(buf, recorded, 16, 2)
    _, rows, times = rc.ids.decode(np.asarray(s.ids))
    items = rows * 5000 + times % 5000

    def covered(array, item_bytes, flat):
        base = array.offset % mmap.ALLOCATIONGRANULARITY
        mine = [(st, n) for h, st, n in asked if h is array._mmap]
        for i in flat.tolist():
            o = base + i * item_bytes
            assert any(st <= o and o + item_bytes <= st + n for st, n in mine), i

    action_leaf = next(a for a in buf.storage._inner.arrays if a.dtype == np.int64)
    covered(action_leaf, 24, items)
    (ring,) = buf.storage.compressed_rings().values()
    store = ring.slots
    _, offsets, lengths = next(v for v in store._generations.values() if v[0] is store._index.arena)
    covered(offsets, 8, items)  # the newest frame of each sampled step
    covered(lengths, 4, items)
    buf.close()
