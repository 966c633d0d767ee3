"""A save killed while it deletes the replaced checkpoint leaves nothing that later saves
keep forever (issue 23, item 8).

The child process saves twice; during the second save's cleanup (after its new
directory is in place) it is SIGKILLed at its k-th ``unlink``/``rmdir``, for every
k. Deleting the ``.old-*`` directory in directory order could remove its marker
first, leaving a directory that no later save recognised as its own.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import recollect as rc

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import recollect as rc

    path, kill_at = sys.argv[1], int(sys.argv[2])
    spec = {f"leaf_{i}": rc.ArraySpec((2,), np.float32) for i in range(6)}
    buf = rc.ReplayBuffer(spec, 16, 2)
    buf.add_batch({k: np.zeros((2, 2), np.float32) for k in spec})
    buf.save(path)
    buf.add_batch({k: np.ones((2, 2), np.float32) for k in spec})
    calls = [0]
    in_place = [False]
    rename, unlink, rmdir = os.rename, os.unlink, os.rmdir

    def renamed(src, dst, *args, **kwargs):
        rename(src, dst, *args, **kwargs)
        in_place[0] = os.fspath(dst) == os.path.abspath(path)

    def killing(real):
        def call(*args, **kwargs):
            if in_place[0]:
                calls[0] += 1
                if calls[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return call

    os.rename, os.unlink, os.rmdir = renamed, killing(unlink), killing(rmdir)
    buf.save(path)
    print("cleanup calls", calls[0])
    """
)


def run_child(tmp_path, path, kill_at: int) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.run(
        [sys.executable, str(script), str(path), str(kill_at)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # about 4.5 s (killed subprocesses): runs with CI=true / --run-slow
def test_a_kill_during_cleanup_leaves_nothing_the_next_save_keeps(tmp_path):
    probe = run_child(tmp_path, tmp_path / "probe" / "replay", 10**6)
    assert probe.returncode == 0, probe.stderr
    total = int(probe.stdout.split()[-1])
    assert total >= 8  # the manifest, the marker, the rmdir and the state files
    killed = 0
    for kill_at in range(1, total + 1):
        root = tmp_path / f"k{kill_at}"
        path = root / "replay"
        run = run_child(tmp_path, path, kill_at)
        assert run.returncode in (0, -signal.SIGKILL), run.stderr
        killed += run.returncode == -signal.SIGKILL
        restored = rc.ReplayBuffer.load(path)  # the new checkpoint is in place
        np.testing.assert_array_equal(restored.reader.gather_row(0)["leaf_0"][-1], [1, 1])
        buf = rc.ReplayBuffer.from_config(restored.config())
        buf.save(path)  # the next successful save cleans up what the killed one left
        assert sorted(p.name for p in root.iterdir()) == ["replay"], kill_at
        assert sorted(p.name for p in path.iterdir())[0] == ".recollect-save"
    assert killed == total


def test_a_users_look_alike_directories_are_left_alone(tmp_path):
    buf = rc.ReplayBuffer({"x": rc.ArraySpec((), np.float32)}, 8, 2)
    path = tmp_path / "replay"
    buf.save(path)
    keep = tmp_path / "replay.old-0123456789abcdef"  # our name pattern, not our marker
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    backup = tmp_path / "replay.old-backup"
    backup.mkdir()
    buf.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "replay",
        "replay.old-0123456789abcdef",
        "replay.old-backup",
    ]
    assert (keep / "notes.txt").read_text() == "mine"
