"""storage.gather._Blocks: recycled gather output memory is never handed out while in use."""

from __future__ import annotations

import gc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from recollect.storage.gather import ALIGN_BYTES, _Blocks

MiB = 1 << 20


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), min_size=1, max_size=60))
def test_a_block_in_use_is_never_handed_out_again(ops):
    """Random get/release sequences: live views never share memory; all are aligned."""
    blocks = _Blocks(keep=3, max_cached_bytes=8 * MiB)
    live: list[np.ndarray] = []
    for take, index in ops:
        if take or not live:
            live.append(_checked_get(blocks, live))
            assert sum(blocks_free(blocks)) <= 3  # spares are trimmed on every get
            assert sum(b.nbytes for b in blocks.blocks) <= 8 * MiB + MiB + ALIGN_BYTES
        else:
            live.pop(index % len(live))


def _checked_get(blocks: _Blocks, live: list[np.ndarray]) -> np.ndarray:
    """A new 1 MiB view: aligned and sharing no memory with any live one (no names kept)."""
    view = blocks.get(MiB)
    assert view.ctypes.data % ALIGN_BYTES == 0 and view.nbytes == MiB
    assert not any(np.shares_memory(view, other) for other in live)
    return view


def blocks_free(blocks: _Blocks) -> list[bool]:
    import sys

    return [sys.getrefcount(b) == 3 for b in blocks.blocks]  # list + loop name + argument


def test_a_working_set_larger_than_keep_is_recycled_once_released():
    blocks = _Blocks(keep=2)
    held = [blocks.get(MiB) for _ in range(10)]  # e.g. ten prefetch queues' batches
    addresses = {v.ctypes.data for v in held}
    del held
    gc.collect()
    again = [blocks.get(MiB) for _ in range(2)]
    assert {v.ctypes.data for v in again} <= addresses  # no fresh allocation
    assert len(blocks.blocks) <= 2 + 2  # the other free blocks were dropped as spares


def test_small_and_huge_requests_are_plain_allocations():
    blocks = _Blocks(min_bytes=MiB, max_bytes=4 * MiB)
    for nbytes in (100, 8 * MiB):
        view = blocks.get(nbytes)
        assert view.nbytes == nbytes and view.ctypes.data % ALIGN_BYTES == 0
    assert blocks.blocks == []
