"""Loads while a thread of the same process saves to the same path return the old or the
new state, never fail (issue 23, item 6).

Within one process the saver's thread can lose the GIL between its two renames
(``path -> path.old-*`` and ``path.tmp-* -> path``), so a loader often runs while
``path`` is missing and reads the complete ``path.tmp-*`` sibling, which is then
renamed under it. That sibling's manifest is the same file (inode, mtime, bytes)
once renamed into place, so the loader took the failure for a damaged
checkpoint. ``widen`` makes that window 3 ms long, as a descheduled saver does.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import recollect as rc

SPEC = {"obs": rc.ArraySpec((3,), np.float32)}
LOADS = 300


def check_consistent(buf: rc.ReplayBuffer) -> int:
    """Each stored step holds its own time (a torn mix of two saves would not); returns t."""
    index = buf.table.index
    for row in range(buf.num_envs):
        times = np.arange(index.lo[row], index.hi[row])
        np.testing.assert_array_equal(buf.reader.gather_row(row)["obs"][:, 0], times)
    return int(index.t.max())


@pytest.mark.parametrize("widen", [False, True], ids=["plain", "renames_3ms_apart"])
@pytest.mark.parametrize("mmap", [False, True], ids=["read", "mmap"])
def test_loads_while_a_thread_saves_never_fail(tmp_path, monkeypatch, widen, mmap):
    if widen:
        rename = os.rename

        def descheduled_between_renames(src, dst):
            rename(src, dst)
            if ".old-" in os.fspath(dst):
                time.sleep(0.003)

        monkeypatch.setattr(os, "rename", descheduled_between_renames)
    buf = rc.ReplayBuffer(SPEC, 32, 2)
    path = tmp_path / "replay"
    buf.add_batch({"obs": np.zeros((2, 3), np.float32)})
    buf.save(path)
    stop = threading.Event()
    saves = [0]

    def saver() -> None:
        t = 1
        while not stop.is_set():
            buf.add_batch({"obs": np.full((2, 3), t, np.float32)})
            buf.save(path)
            t += 1
            saves[0] += 1

    thread = threading.Thread(target=saver)
    thread.start()
    clocks = []
    deadline = time.monotonic() + 60
    try:
        # LOADS loads at least, and on until the saver has saved often enough to overlap them
        # (the GIL may favour the loading thread for a while)
        while len(clocks) < LOADS or (saves[0] <= 10 and time.monotonic() < deadline):
            clocks.append(check_consistent(rc.ReplayBuffer.load(path, mmap=mmap)))
    finally:
        stop.set()
        thread.join()
    assert clocks == sorted(clocks)  # each load sees the same or a newer save
    assert saves[0] > 10  # the saves did overlap the loads
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay"]


def test_a_damaged_checkpoint_still_fails_at_once(tmp_path):
    buf = rc.ReplayBuffer(SPEC, 32, 2)
    buf.add_batch({"obs": np.zeros((2, 3), np.float32)})
    path = buf.save(tmp_path / "replay")
    leaf = next(path.glob("state-*obs.npy"))
    leaf.write_bytes(leaf.read_bytes()[:-1])
    start = time.monotonic()
    with pytest.raises(rc.errors.CheckpointError, match=r"obs\.npy"):
        rc.ReplayBuffer.load(path)
    assert time.monotonic() - start < 5  # reported, not retried LOAD_ATTEMPTS times
    with pytest.raises(rc.errors.CheckpointError, match="no such checkpoint directory"):
        rc.ReplayBuffer.load(tmp_path / "nothing")
