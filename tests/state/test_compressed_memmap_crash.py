"""Compressed frames on memmap storage survive SIGKILL (issue 41): a killed writer leaves a
directory that plain reopen refuses and ``recover=True`` reopens with every stored stack
equal to the one that was added (no torn value), through block recycling and the
dictionary's new generation of files."""

from __future__ import annotations

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

from recollect.errors import CheckpointError
from recollect.storage import compressed_parts

COMMON = textwrap.dedent(
    """
    import numpy as np
    import recollect as rc
    from recollect.storage import ZstdCodec

    SIDE = 24
    POOL = np.random.default_rng(0).integers(0, 255, (997, SIDE, SIDE), np.uint8)

    def frame(row, t):
        return POOL[(389 * row + t) % 997]

    def episode_start(row, t):
        return t - t % (7 + row)

    def stack(row, t):
        start = episode_start(row, t)
        return np.stack([frame(row, max(t - 3 + j, start)) for j in range(4)], -1)

    def make(directory, **kw):
        spec = {"observation": rc.ArraySpec((SIDE, SIDE, 4), np.uint8),
                "is_first": rc.ArraySpec((), bool)}
        return rc.ReplayBuffer(
            spec, 2 * 128, 2, sampler=rc.Prioritized(), sequence_length=2,
            storage="memmap", directory=directory,
            frame_stacks={"observation": rc.FrameStack(4)},
            compression={"observation": ZstdCodec(train_values=64)}, **kw)

    def step(t):
        obs = np.stack([stack(r, int(t[r])) for r in range(2)])
        first = np.array([episode_start(r, int(t[r])) == int(t[r]) for r in range(2)])
        return {"observation": obs, "is_first": first}
    """
)

CHILD = COMMON + textwrap.dedent(
    """
    import sys
    import recollect.storage.compression.compressed_parts as parts
    parts.BLOCK_BYTES = 1 << 16  # small blocks: recycled within a short run
    directory, flush_every, exit_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    buf = make(directory, recover=True)
    print("start", flush=True)
    k = 0
    while True:
        buf.add_batch(step(buf.table.index.t))
        k += 1
        if k % flush_every == 0:
            buf.flush()
        if k == exit_after:
            import os
            os._exit(0)  # no flush at exit, as after a kill
    """
)


def _helpers(tmp_path: Path, monkeypatch) -> dict:
    monkeypatch.setattr(compressed_parts, "BLOCK_BYTES", 1 << 16)  # as the child
    scope: dict = {}
    exec(COMMON, scope)  # the child's own definitions, for the oracle
    return scope


def _check(buf, h) -> None:
    """Every stored step's stack equals the one that was added."""
    if not buf.num_frames():
        return
    data = buf.gather_all()["observation"]
    for row in range(buf.num_envs):
        lo = int(buf.table.index.lo[row])
        for j in range(data.shape[1]):
            np.testing.assert_array_equal(data[row, j], h["stack"](row, lo + j), f"{row} {j}")


def _run_child(tmp_path, directory, flush_every, exit_after=-1):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, str(script), str(directory), str(flush_every), str(exit_after)],
            stdout=out,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        ), log


def test_unflushed_directory_is_refused_and_recovered(tmp_path, monkeypatch):
    h = _helpers(tmp_path, monkeypatch)
    proc, _ = _run_child(tmp_path, tmp_path / "d", flush_every=5, exit_after=23)
    assert proc.wait(60) == 0
    with pytest.raises(CheckpointError, match="was written after its last flush"):
        h["make"](tmp_path / "d")
    with pytest.warns(UserWarning, match="6 step"):
        buf = h["make"](tmp_path / "d", recover=True)
    assert buf.num_frames() == 2 * 20
    _check(buf, h)
    buf.sample(8)


@pytest.mark.slow  # about 20 s of killed subprocesses on 2 cores
def test_sigkill_during_adds_always_reopens_with_recover(tmp_path, monkeypatch):
    h = _helpers(tmp_path, monkeypatch)
    rng = np.random.default_rng(0)
    directory = tmp_path / "d"
    counts, generations = [], set()
    for _ in range(12):
        proc, log = _run_child(tmp_path, directory, flush_every=int(rng.integers(1, 80)))
        deadline = time.monotonic() + 60
        while "start" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            buf = h["make"](directory, recover=True)
        _check(buf, h)
        if buf.table.index.count(2, buf.writer.episode_aware):
            s = buf.sample(16, 2)
            buf.update_priorities(s.ids, np.full(len(s.ids), 2.0))
        counts.append(int(buf.table.index.t.sum()))
        generations.update(p.name for p in directory.glob("compressed-*.blocks"))
        buf.close()
        del buf
        gc.collect()
    assert counts[-1] > 2 * 300  # the ring wrapped twice: blocks (~110 values) were recycled
    (blocks,) = directory.glob("compressed-*.blocks")
    # ring of ~262 values of ~600 B (~2.4 blocks): blocks in use, the ones pinned by
    # dropped steps until overwritten, 2 reserved ahead and one growth step (4 blocks)
    assert blocks.stat().st_size <= 16 * (1 << 16)
