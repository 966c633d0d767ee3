"""Files planted in a buffer's directory or a checkpoint are never followed (issue 35, item 4).

- Creating a memmap buffer where ``leaf-001-x.npy -> /some/file`` was planted leaves
  ``/some/file`` untouched (with or without ``force``), also when creation fails later.
- Loading a checkpoint whose listed file is a FIFO raises CheckpointError at once (it
  used to block forever in ``open``); one whose listed file is a link to a file outside
  the checkpoint (even with the right bytes) raises instead of reading it.
- Reopening a memmap directory whose file was replaced by a link raises.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError

SPEC = {"x": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}
LEAF = "leaf-001-x.npy"


def fill(buf: rc.ReplayBuffer, steps: int = 5) -> None:
    for t in range(steps):
        buf.add_batch({"x": np.full((2, 3), t, np.float32), "is_last": np.zeros(2, bool)})


def victim(tmp_path: Path) -> tuple[Path, bytes]:
    target = tmp_path / "victim.bin"
    content = b"precious data that must survive\n" * 64
    target.write_bytes(content)
    return target, content


@pytest.mark.parametrize("force", [False, True])
def test_creating_a_memmap_buffer_never_writes_through_a_planted_link(tmp_path, force):
    target, content = victim(tmp_path)
    directory = tmp_path / "buf"
    directory.mkdir()
    (directory / LEAF).symlink_to(target)
    buf = rc.ReplayBuffer(SPEC, 8, 2, storage="memmap", directory=directory, force=force)
    fill(buf)
    buf.flush()
    assert target.read_bytes() == content
    assert not (directory / LEAF).is_symlink() and (directory / LEAF).is_file()
    assert buf.sample(4, 2).data["x"].shape == (4, 2, 3)


def test_a_creation_that_fails_leaves_the_link_target_untouched(tmp_path):
    target, content = victim(tmp_path)
    directory = tmp_path / "buf"
    directory.mkdir()
    (directory / "leaf-000-is_last.npy").symlink_to(target)  # created first
    (directory / LEAF).mkdir()  # the next leaf cannot be created
    with pytest.raises(OSError):
        rc.ReplayBuffer(SPEC, 8, 2, storage="memmap", directory=directory)
    assert target.read_bytes() == content


def test_reopening_a_memmap_directory_whose_file_became_a_link_raises(tmp_path):
    directory = tmp_path / "buf"
    buf = rc.ReplayBuffer(SPEC, 8, 2, storage="memmap", directory=directory)
    fill(buf)
    buf.close()
    del buf
    outside = tmp_path / "outside.npy"
    os.replace(directory / LEAF, outside)
    (directory / LEAF).symlink_to(outside)
    with pytest.raises(CheckpointError, match=r"leaf-001-x.npy: is a symbolic link"):
        rc.ReplayBuffer(SPEC, 8, 2, storage="memmap", directory=directory)


@pytest.fixture
def saved(tmp_path) -> Path:
    buf = rc.ReplayBuffer(SPEC, 8, 2, rng=0)
    fill(buf)
    buf.save(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_a_listed_file_linked_outside_the_checkpoint_is_not_read(saved, tmp_path):
    name = "state-storage-columns-leaf-001-x.npy"
    outside = tmp_path / "outside.npy"
    os.replace(saved / name, outside)  # the same bytes: its checksum matches
    (saved / name).symlink_to(outside)
    with pytest.raises(CheckpointError, match=rf"{name}: is a symbolic link"):
        rc.ReplayBuffer.load(saved)


def test_a_linked_manifest_is_not_read(saved, tmp_path):
    outside = tmp_path / "manifest.json"
    os.replace(saved / "manifest.json", outside)
    (saved / "manifest.json").symlink_to(outside)
    with pytest.raises(CheckpointError, match=r"manifest.json: cannot be read .*symbolic link"):
        rc.ReplayBuffer.load(saved)


@pytest.mark.parametrize("name", ["state-storage-columns-leaf-001-x.npy", "manifest.json"])
def test_a_listed_file_that_is_a_fifo_raises_at_once(saved, name):
    (saved / name).unlink()
    os.mkfifo(saved / name)
    script = textwrap.dedent(
        f"""
        import recollect as rc
        from recollect.errors import CheckpointError
        try:
            rc.ReplayBuffer.load({str(saved)!r})
        except CheckpointError as err:
            print("CheckpointError:", err)
        """
    )
    try:  # in a child: the old code blocks forever in open()
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading a checkpoint whose {name} is a FIFO blocked")
    assert "CheckpointError:" in done.stdout, done.stderr
    assert "not a regular file" in done.stdout
