"""Memory estimates: ``estimate_memory`` before allocation equals ``buf.nbytes`` after."""

from __future__ import annotations

import mmap
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
import recollect.memory as memory
from recollect.errors import InsufficientMemoryError, InvalidArgumentError

DTYPES = [np.float32, np.int32, np.uint8, np.bool_, np.float16, np.int64]


def _spec(shapes, dtypes):
    spec = {
        f"leaf{i}": rc.ArraySpec(s, d) for i, (s, d) in enumerate(zip(shapes, dtypes, strict=False))
    }
    spec["is_last"] = rc.ArraySpec((), bool)
    return spec


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(0, 5), max_size=3).map(tuple), min_size=1, max_size=4),
    dtypes=st.lists(st.sampled_from(DTYPES), min_size=4, max_size=4),
    num_envs=st.integers(1, 4),
    max_length=st.integers(1, 9),
)
def test_estimate_equals_nbytes(shapes, dtypes, num_envs, max_length):
    spec = _spec(shapes, dtypes)
    capacity = num_envs * max_length
    buf = rc.ReplayBuffer(spec, capacity, num_envs)
    assert rc.estimate_memory(spec, capacity, num_envs) == buf.nbytes
    expected = capacity * sum(
        int(np.prod(s)) * np.dtype(d).itemsize for s, d in zip(shapes, dtypes, strict=False)
    )
    assert buf.storage.nbytes == expected + capacity  # + is_last
    assert buf.nbytes == buf.storage.nbytes + buf.table.nbytes


@pytest.mark.parametrize("stack_size", [1, 2, 4])
@pytest.mark.parametrize("num_envs", [1, 3])
def test_estimate_with_frame_stacks_equals_nbytes(stack_size, num_envs):
    spec = {
        "observation": rc.ArraySpec((5, 6, stack_size), np.uint8),
        "reward": rc.ArraySpec((), np.float16),
        "is_first": rc.ArraySpec((), bool),
    }
    for contiguous in (False, True):
        stacks = {"observation": rc.FrameStack(stack_size, contiguous=contiguous)}
        buf = rc.ReplayBuffer(spec, num_envs * 10, num_envs, frame_stacks=stacks)
        estimate = rc.estimate_memory(spec, num_envs * 10, num_envs, frame_stacks=stacks)
        assert estimate == buf.nbytes
        if contiguous:
            # uint8 stacks of 2 or 4 on the last axis use 2/4-frame blocks (lanes layout): the
            # ring is rounded up to whole blocks and the padding takes one block.
            ring = -(-(10 + stack_size - 1) // stack_size) * stack_size
            pad = stack_size if stack_size > 1 else 1
        else:  # rows layout: history margin of stack_size - 1 frames, one padding frame
            ring, pad = 10 + stack_size - 1, 1
        steps = num_envs * 10 * 3 + (num_envs * ring + pad) * 30 + num_envs * ring
        assert buf.storage.nbytes == steps


def test_memmap_estimate_is_the_same_bytes(tmp_path):
    spec = _spec([(3,)], [np.float32])
    assert rc.estimate_memory(spec, 100, 2, storage="memmap") == rc.estimate_memory(spec, 100, 2)
    buf = rc.ReplayBuffer(spec, 100, 2, storage="memmap", directory=tmp_path / "m")
    assert buf.nbytes == rc.estimate_memory(spec, 100, 2, storage="memmap")


def test_w1_frame_store_is_about_eight_times_smaller():
    spec = {
        "observation": rc.ArraySpec((84, 84, 4), np.uint8),
        "action": rc.ArraySpec((), np.int64),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
    }
    naive = rc.estimate_memory(spec, 100_000, 8) + 100_000 * 84 * 84 * 4  # + next_observation
    stacked = rc.estimate_memory(spec, 100_000, 8, frame_stacks={"observation": rc.FrameStack(4)})
    assert stacked / 100_000 <= 7_400
    assert naive / stacked > 7.5


def test_ram_buffer_larger_than_available_memory_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "available_memory", lambda: 1_000)
    spec = _spec([(100,)], [np.float32])
    with pytest.raises(InsufficientMemoryError, match=r"storage='memmap'.*force=True"):
        rc.ReplayBuffer(spec, 100, 1)
    with pytest.raises(MemoryError, match=r"needs 0.00 GiB of RAM but only 0.00 GiB"):
        rc.ReplayBuffer(spec, 100, 1)
    assert rc.ReplayBuffer(spec, 100, 1, force=True).storage.nbytes == 100 * 401
    buf = rc.ReplayBuffer(spec, 100, 1, storage="memmap", directory=tmp_path / "d")
    assert buf.storage.nbytes == 100 * 401


def test_available_memory_reads_meminfo():
    available = memory.available_memory()
    assert available is None or available > 0


def test_bad_storage_arguments_are_rejected(tmp_path):
    spec = _spec([(2,)], [np.int32])
    with pytest.raises(
        InvalidArgumentError, match=r"`storage` must be one of \('numpy', 'memmap'\)"
    ):
        rc.estimate_memory(spec, 10, 1, storage="disk")
    with pytest.raises(InvalidArgumentError, match=r"`storage` must be one of"):
        rc.ReplayBuffer(spec, 10, storage="disk")
    with pytest.raises(
        InvalidArgumentError, match=r"`directory` is required with storage='memmap'"
    ):
        rc.ReplayBuffer(spec, 10, storage="memmap")
    with pytest.raises(InvalidArgumentError, match=r"only allowed with it"):
        rc.ReplayBuffer(spec, 10, directory=tmp_path)
    with pytest.raises(InvalidArgumentError, match=r"positive multiple of `num_envs`"):
        rc.estimate_memory(spec, 10, 3)


def _mapped_bytes(arrays) -> int:
    """Bytes of the arrays whose memory is an ``mmap`` (``storage.arena.reserve``)."""
    total = 0
    for array in arrays:
        base = array
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, memoryview):  # np.frombuffer's view of the mapping
            base = base.obj
        total += array.nbytes if isinstance(base, mmap.mmap) else 0
    return total


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"sampler": "prioritized", "sequence_length": 2},
        {"sampler": "prioritized0", "sequence_length": 3, "track_times_sampled": True},
    ],
)
def test_estimate_counts_every_allocation_of_the_buffer(kw):
    kw = dict(kw)
    kind = kw.pop("sampler", None)
    spec = {"observation": rc.ArraySpec((4,), np.float32), "is_last": rc.ArraySpec((), bool)}
    capacity, num_envs = 200_000, 4

    def sampler():
        if kind is None:
            return None
        return rc.Prioritized(priority_exponent=0.0 if kind == "prioritized0" else 0.6)

    tracked = {k: v for k, v in kw.items() if k == "track_times_sampled"}
    estimate = rc.estimate_memory(spec, capacity, num_envs, sampler=sampler(), **tracked)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        buf = rc.ReplayBuffer(spec, capacity, num_envs, sampler=sampler(), **kw)
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert buf.nbytes == estimate
    allocated += _mapped_bytes(buf.storage.arrays)  # anonymous mappings: tracemalloc misses them
    assert abs(allocated - estimate) <= 0.1 * estimate, (allocated, estimate)
    # the table is counted, and its episode-end log grows with the ends (none yet)
    assert estimate > capacity * 17
    if kind is None:
        assert estimate - capacity * 17 < 1024
