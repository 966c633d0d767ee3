"""RingStorage's memory layout: time-major leaves in RAM with several env rows, row-major
memory-mapped files, and every path that indexes the memory (gathers, SB3's flat takes,
checkpoints written and read in bounded chunks, mapped loads) agreeing with ``[row, slot]``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.specs import FlatSpec
from recollect.state import npyio
from recollect.storage.ring import RingStorage

SPEC = {
    "a": rc.ArraySpec((3,), np.float32),
    "b": rc.ArraySpec((), np.bool_),
    "c": rc.ArraySpec((2, 2), np.int64),
}


def _filled(envs: int, length: int, seed: int) -> RingStorage:
    ring = RingStorage(FlatSpec(SPEC), envs, length)
    rng = np.random.default_rng(seed)
    for array in ring.arrays:  # through the [row, slot] views
        array[...] = rng.integers(0, 100, array.shape).astype(array.dtype)
    return ring


def test_several_rows_are_time_major_and_one_row_is_plain():
    ring = RingStorage(FlatSpec(SPEC), 4, 6)
    assert ring.time_major
    for array, flat in zip(ring.arrays, ring.flat_views, strict=True):
        assert array.shape[:2] == (4, 6)
        assert array.swapaxes(0, 1).flags.c_contiguous  # one step of every row: one block
        assert np.shares_memory(array, flat)
    one = RingStorage(FlatSpec(SPEC), 1, 6)
    assert not one.time_major
    assert all(a.flags.c_contiguous for a in one.arrays)


def test_a_ring_with_a_large_step_stays_row_major():
    """A window's consecutive large steps stay adjacent (gathers of pairs are faster)."""
    image = {**SPEC, "o": rc.ArraySpec((16, 16, 4), np.uint8)}  # 1,024 bytes per step
    ring = RingStorage(FlatSpec(image), 4, 6)
    assert not ring.time_major
    assert all(a.flags.c_contiguous for a in ring.arrays)
    small = {**SPEC, "o": rc.ArraySpec((1023,), np.uint8)}
    assert RingStorage(FlatSpec(small), 4, 6).time_major


@settings(max_examples=40, deadline=None)
@given(envs=st.integers(1, 5), length=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_a_gather_and_flat_index_read_the_row_slot_entry(envs, length, seed):
    ring = _filled(envs, length, seed)
    rng = np.random.default_rng(seed + 1)
    rows = rng.integers(0, envs, (5, 2))
    slots = rng.integers(0, length, (5, 2))
    got = ring.gather(rows, slots)
    for leaf, array, flat in zip(got, ring.arrays, ring.flat_views, strict=True):
        assert np.array_equal(leaf, array[rows, slots])
        assert np.array_equal(flat[ring.flat_index(rows, slots)], array[rows, slots])


@settings(max_examples=25, deadline=None)
@given(
    envs=st.integers(1, 4),
    length=st.integers(2, 9),
    steps=st.integers(1, 20),
    chunk=st.sampled_from([8, 24, 1 << 26]),
    seed=st.integers(0, 2**16),
)
def test_a_checkpoint_round_trip_equals_the_buffer_in_small_chunks(
    tmp_path_factory, envs, length, steps, chunk, seed
):
    """Partial and wrapped rings; chunks smaller than one entry split it further."""
    rng = np.random.default_rng(seed)
    buf = rc.ReplayBuffer(SPEC, envs * length, envs, rng=0)
    for _ in range(steps):
        buf.add_batch(
            {
                "a": rng.random((envs, 3)).astype(np.float32),
                "b": rng.random(envs) < 0.5,
                "c": rng.integers(-9, 9, (envs, 2, 2)),
            }
        )
    path = tmp_path_factory.mktemp("ckpt") / "b"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(npyio, "_CHUNK_BYTES", chunk)
        buf.save(path)
        back = rc.ReplayBuffer.load(path)
    want, got = buf.gather_all(), back.gather_all()
    for key in SPEC:
        assert np.array_equal(got[key], want[key])
    assert back.storage.time_major == (envs > 1)


def test_a_mapped_load_makes_the_ring_row_major_and_keeps_reads_and_writes(tmp_path):
    envs, length = 3, 4
    buf = rc.ReplayBuffer(SPEC, envs * length, envs, rng=0)
    for t in range(length + 2):  # wrapped: every column stored, so the files map
        buf.add_batch({"a": np.full((envs, 3), t, np.float32), "b": np.ones(envs, bool),
                       "c": np.full((envs, 2, 2), t)})  # fmt: skip
    buf.save(tmp_path / "b")
    mapped = rc.ReplayBuffer.load(tmp_path / "b", mmap=True)
    assert not mapped.storage.time_major
    assert all(isinstance(a.base, np.memmap) for a in mapped.storage.arrays)
    assert np.array_equal(mapped.gather_all()["a"], buf.gather_all()["a"])
    step = {"a": np.full((envs, 3), 99, np.float32), "b": np.ones(envs, bool),
            "c": np.full((envs, 2, 2), 99)}  # fmt: skip
    mapped.add_batch(step)
    buf.add_batch(step)
    assert np.array_equal(mapped.gather_all()["c"], buf.gather_all()["c"])


def test_a_partly_mapped_ring_copies_its_time_major_leaves_row_major():
    ring = _filled(3, 4, 0)
    before = [a.copy() for a in ring.arrays]
    ring.arrays[0] = np.ascontiguousarray(ring.arrays[0])  # as a mapped file would be
    ring.refresh_views()
    assert not ring.time_major
    assert all(a.flags.c_contiguous for a in ring.arrays)
    for got, want in zip(ring.gather(np.array([2, 0]), np.array([1, 3])), before, strict=True):
        assert np.array_equal(got, want[[2, 0], [1, 3]])


_REUSED_HEAP = """
import ctypes, numpy as np
libc = ctypes.CDLL("libc.so.6")
assert libc.mallopt(-3, 64 << 20) == 1  # M_MMAP_THRESHOLD: the heap serves up to 64 MiB
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) << 10
chunk = np.ones(24 << 20, np.uint8)  # a heap chunk below another allocation ...
pin = np.ones(1 << 16, np.uint8)
del chunk  # ... freed: the next large calloc reuses it, and zeroes it page by page
libc.malloc_trim(0)
import recollect as rc
from recollect.specs import FlatSpec
from recollect.storage.ring import RingStorage
before = anon()
ring = RingStorage(FlatSpec({"o": rc.ArraySpec((32, 32, 4), np.uint8)}), 1, 4000)
print((anon() - before) >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc")
def test_ring_arrays_are_committed_only_when_written_whatever_the_allocator_state():
    """A 16 MiB leaf took 14-16 MiB of RSS before any write when ``calloc`` reused a heap
    chunk; a pickled or loaded ring replaces its arrays unwritten, so that doubled a load."""
    done = subprocess.run(
        [sys.executable, "-c", _REUSED_HEAP], capture_output=True, text=True, timeout=120,
        check=True,
    )  # fmt: skip
    assert int(done.stdout.split()[-1]) < 2, done.stdout
