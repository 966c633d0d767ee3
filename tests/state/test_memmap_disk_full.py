"""A memmap buffer on a nearly full disk: DiskFullError naming the file, never SIGBUS,
and nothing half-created (issue 23, item 3).

The real-disk cases run in a child process inside ``unshare -rm`` with a 20 MiB
tmpfs mounted, filled so that ``extra`` pages are left beyond what the leaf
files need: the bookkeeping file ``written.npy`` (3 pages here), then the state
files of the first flush, then the manifest no longer fit, one after the other.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import recollect as rc
from recollect.errors import DiskFullError

CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import recollect as rc

    root, extra = sys.argv[1], int(sys.argv[2])
    spec = {"obs": rc.ArraySpec((100,), np.float32), "n": rc.ArraySpec((), np.int64)}
    capacity, num_envs, page = 8192, 1024, 4096

    def pages(nbytes):
        return -(-nbytes // page)

    leaves = pages(128 + capacity * 100 * 4) + pages(128 + capacity * 8)
    free = os.statvfs(root).f_bavail
    fd = os.open(os.path.join(root, "filler"), os.O_CREAT | os.O_WRONLY)
    os.posix_fallocate(fd, 0, (free - leaves - extra) * page)
    os.close(fd)
    directory = os.path.join(root, "mm")
    try:
        buf = rc.ReplayBuffer(spec, capacity, num_envs, storage="memmap", directory=directory)
    except rc.errors.DiskFullError as err:
        assert isinstance(err, OSError) and err.errno == 28, err
        print("DiskFullError:", err)
        assert not os.path.exists(directory), os.listdir(directory)
    else:
        t = np.zeros(num_envs, np.int64)
        buf.add_batch({"obs": np.ones((num_envs, 100), np.float32), "n": t})
        buf.close()
        print("created")
    print("entries:", sorted(os.listdir(root)))
    """
)


def _tmpfs_available() -> str | None:
    """Why a tmpfs cannot be mounted in a user namespace here, or None when it can."""
    if shutil.which("unshare") is None:
        return "no unshare binary"
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m none /mnt && echo ok"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.stdout.strip() != "ok":
        return f"cannot mount a tmpfs in a user+mount namespace: {probe.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="module")
def small_tmpfs():
    reason = _tmpfs_available()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("extra", range(7))
def test_a_nearly_full_disk_raises_disk_full_error_not_sigbus(small_tmpfs, tmp_path, extra):
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    run = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=20m tmpfs "{mount}" && exec "{sys.executable}" '
            f'"{script}" "{mount}" {extra}',
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"exit {run.returncode} (135/-7: SIGBUS)\n{out}"
    assert "entries: ['filler']" in out or "created" in out, out
    if "DiskFullError" in out:
        assert "needs" in out and "bytes" in out and ".npy" in out, out


def test_a_filesystem_without_fallocate_gets_zeros_written_not_a_sparse_file(tmp_path, monkeypatch):
    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    spec = {"obs": rc.ArraySpec((256,), np.float32)}
    buf = rc.ReplayBuffer(spec, 64, 64, storage="memmap", directory=tmp_path)
    for name in ("written.npy", "leaf-000-obs.npy"):
        st = (tmp_path / name).stat()
        assert st.st_blocks * 512 >= st.st_size, f"{name} is sparse"
    buf.close()


def test_disk_full_error_names_the_bookkeeping_file_and_leaves_nothing(tmp_path, monkeypatch):
    real = os.posix_fallocate

    def full_for_written(fd, offset, length):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("written.npy"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", full_for_written)
    spec = {"obs": rc.ArraySpec((4,), np.float32)}
    with pytest.raises(DiskFullError, match=r"written\.npy needs \d+ bytes but only \d+ bytes"):
        rc.ReplayBuffer(spec, 64, 4, storage="memmap", directory=tmp_path / "mm")
    assert not (tmp_path / "mm").exists()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("user file")
    with pytest.raises(DiskFullError):
        rc.ReplayBuffer(spec, 64, 4, storage="memmap", directory=tmp_path / "kept")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["mine.txt"]
