"""Memmap crash safety: torn files, SIGKILL during flush and add, recover=True, close()."""

from __future__ import annotations

import errno
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError

SPEC = {"n": rc.ArraySpec((), np.int64), "obs": rc.ArraySpec((5,), np.float32)}
KW = {"capacity": 64, "num_envs": 2, "storage": "memmap"}

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import recollect as rc

    directory, flush_every = sys.argv[1], int(sys.argv[2])
    spec = {"n": rc.ArraySpec((), np.int64), "obs": rc.ArraySpec((5,), np.float32)}
    buf = rc.ReplayBuffer(spec, 64, 2, storage="memmap", directory=directory, recover=True,
                          sampler=rc.Prioritized(), sequence_length=2)
    print("start", flush=True)
    k = 0
    while True:
        t = buf.table.index.t
        buf.add_batch({"n": t, "obs": np.repeat(t[:, None], 5, 1).astype(np.float32)})
        k += 1
        if k % flush_every == 0:
            buf.flush()
    """
)


def _step(t):
    t = np.asarray(t, np.int64)
    return {"n": t, "obs": np.repeat(t[:, None], 5, 1).astype(np.float32)}


def _check_consistent(buf) -> None:
    """Every stored step holds its own time: no slot from another time was restored."""
    for row in range(buf.num_envs):
        data = buf.reader.gather_row(row)
        times = np.arange(buf.table.index.lo[row], buf.table.index.hi[row])
        np.testing.assert_array_equal(data["n"], times)
        np.testing.assert_array_equal(data["obs"], np.repeat(times[:, None], 5, 1))


def _reopen(directory: Path, **kw):
    return rc.ReplayBuffer(
        SPEC, directory=directory, sampler=rc.Prioritized(), sequence_length=2, **KW, **kw
    )


def _kill_loop(tmp_path: Path, kills: int, flush_every: int, seed: int, strict: bool) -> None:
    rng = np.random.default_rng(seed)
    directory = tmp_path / "mm"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    frames = []
    for _ in range(kills):
        log = tmp_path / "log.txt"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, str(script), str(directory), str(flush_every)], stdout=out
            )
        deadline = time.monotonic() + 30
        while "start" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if strict:  # without recover: a clean reopen or a CheckpointError, never a raw error
            try:
                buf = _reopen(directory)
            except CheckpointError as err:
                assert "was written after its last flush()" in str(err), err
            else:
                _check_consistent(buf)
                del buf
                gc.collect()
        with warnings.catch_warnings():  # the recovery warning appears after a dirty kill
            warnings.simplefilter("ignore", UserWarning)
            buf = _reopen(directory, recover=True)
        _check_consistent(buf)
        if buf.num_frames() >= 4:
            buf.sample(8)
        frames.append(buf.num_frames())
        del buf
        gc.collect()
    assert max(frames) > 0


@pytest.mark.slow  # about 6 s of killed subprocesses: runs with CI=true / --run-slow
def test_sigkill_during_flush_always_reopens_or_raises_checkpoint_error(tmp_path):
    _kill_loop(tmp_path, kills=8, flush_every=1, seed=0, strict=True)


@pytest.mark.slow  # about 17 s on 2 cores: runs with CI=true / --run-slow
def test_sigkill_during_adds_always_reopens_with_recover(tmp_path):
    _kill_loop(tmp_path, kills=20, flush_every=7, seed=1, strict=False)


def _torn_cases() -> list:
    """(prefix, cut) pairs; the slow ones (about 5 s each: ``state-`` has many files) run in CI."""
    slow = {("state-", 0), ("state-", 0.5), ("leaf-", 10), ("state-", 10), ("written", 10)}
    return [
        pytest.param(prefix, cut, marks=[pytest.mark.slow] if (prefix, cut) in slow else [])
        for cut in (0, 10, 0.5)
        for prefix in ("leaf-", "state-", "written")
    ]


@pytest.mark.parametrize(("prefix", "cut"), _torn_cases())
def test_a_torn_file_raises_checkpoint_error(tmp_path, prefix, cut):
    buf = _reopen(tmp_path)
    for t in range(5):
        buf.add_batch(_step([t, t]))
    buf.close()
    del buf
    gc.collect()
    for file in sorted(tmp_path.glob(f"{prefix}*.npy")):
        data = file.read_bytes()
        file.write_bytes(data[: int(cut * len(data)) if isinstance(cut, float) else cut])
        with pytest.raises(CheckpointError, match=str(file.name)):
            _reopen(tmp_path)
        file.write_bytes(data)
        gc.collect()


def test_close_flushes(tmp_path):
    buf = _reopen(tmp_path)
    for t in range(5):
        buf.add_batch(_step([t, t]))
    buf.close()
    again = _reopen(tmp_path)  # the first buffer is still alive: no finalizer flushed it
    assert again.num_frames() == 10
    _check_consistent(again)
    assert buf is not None


def test_recover_reopens_a_dirty_directory_at_its_last_flush(tmp_path):
    buf = _reopen(tmp_path)
    for t in range(40):  # rows of 32 steps: full rings
        buf.add_batch(_step([t, t]))
    buf.flush()
    for t in range(40, 45):  # reuse the slots of times 8..12
        buf.add_batch(_step([t, t]))
    with pytest.raises(CheckpointError, match=r"pass recover=True to reopen it at its last"):
        _reopen(tmp_path)
    with pytest.warns(UserWarning, match=r"last flushed state, 20 step\(s\) dropped"):
        again = _reopen(tmp_path, recover=True)
    assert again.persistence.recovered_steps_dropped == 20  # 2 rows x (5 unflushed + 5 overwritten)
    np.testing.assert_array_equal(again.table.index.lo, [13, 13])
    np.testing.assert_array_equal(again.table.index.hi, [40, 40])
    _check_consistent(again)
    assert (again.sample(64).ids & 0xFFFFFFFFFF >= 13).all()
    assert again.reader.sampler.num_valid == 2 * 26
    assert buf is not None


def test_recover_of_a_clean_directory_drops_nothing(tmp_path):
    buf = _reopen(tmp_path)
    for t in range(5):
        buf.add_batch(_step([t, t]))
    buf.flush()
    again = _reopen(tmp_path, recover=True)
    assert again.persistence.recovered_steps_dropped == 0
    assert again.num_frames() == 10
    assert buf is not None


def test_memmap_files_are_preallocated_on_disk(tmp_path, monkeypatch):
    calls = []
    real = os.posix_fallocate
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, o, n: calls.append(n) or real(fd, o, n))
    buf = rc.ReplayBuffer(SPEC, directory=tmp_path, **KW)
    leaf = next(tmp_path.glob("leaf-001-*.npy"))
    assert max(calls) == leaf.stat().st_size >= 64 * 5 * 4
    assert leaf.stat().st_blocks * 512 >= 64 * 5 * 4  # blocks reserved, not a sparse file
    assert buf.num_frames() == 0


def test_a_full_disk_raises_disk_full_error_with_the_numbers(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(
        rc.errors.DiskFullError, match=r"needs \d+ bytes but only \d+ bytes are free"
    ):
        rc.ReplayBuffer(SPEC, directory=tmp_path / "mm", **KW)
    try:
        rc.ReplayBuffer(SPEC, directory=tmp_path / "mm2", **KW)
    except OSError as err:  # an OSError: `except OSError` handlers of disk code catch it
        assert err.errno == errno.ENOSPC
    assert not list((tmp_path / "mm").glob("leaf-*.npy"))  # no half-reserved file left
