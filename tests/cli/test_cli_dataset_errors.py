"""``recollect export`` / ``import`` errors (issue 36, item 2): one ``Error:`` line, a
non-zero exit, no traceback, and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import recollect as rc

pytest.importorskip("minari")

SPEC = {
    "observation": rc.ArraySpec((4,), np.float32),
    "action": rc.ArraySpec((), np.int64),
    "reward": rc.ArraySpec((), np.float32),
    "is_first": rc.ArraySpec((), bool),
    "is_last": rc.ArraySpec((), bool),
    "is_terminal": rc.ArraySpec((), bool),
}


@pytest.fixture
def where(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.chdir(tmp_path)
    buf = rc.ReplayBuffer(SPEC, 100, 1)
    for t in range(20):
        buf.add(
            {
                "observation": np.full(4, t, np.float32),
                "action": np.int64(t % 2),
                "reward": np.float32(1),
                "is_first": np.bool_(t % 5 == 0),
                "is_last": np.bool_(t % 5 == 4),
                "is_terminal": np.bool_(t % 5 == 4),
            }
        )
    buf.save(tmp_path / "ckpt")
    return tmp_path


def run(*args: str) -> subprocess.CompletedProcess:
    """The real command in a child process: what a user's terminal shows."""
    return subprocess.run(
        [sys.executable, "-m", "recollect", *args], capture_output=True, text=True, timeout=300
    )


def written(where: Path) -> list[str]:
    """What the command left besides the checkpoint and Minari's (empty) datasets root."""
    return sorted(
        str(p.relative_to(where))
        for p in where.rglob("*")
        if not str(p.relative_to(where)).startswith("ckpt")
        and p.relative_to(where) != Path("minari")
    )


def assert_one_error_line(done: subprocess.CompletedProcess, match: str) -> None:
    assert done.returncode in (1, 2), done
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    assert match in errors[0], errors[0]


def test_export_to_minari_with_an_id_without_version_writes_nothing(where):
    done = run(
        "export", "ckpt", "--to", "minari", "--dataset-id", "cartpole", "--env", "CartPole-v1"
    )
    assert_one_error_line(done, "Minari dataset ids have the form (namespace/)name-vN")
    assert "'cartpole-v0'" in done.stderr
    assert written(where) == []
    # the retry with a valid id works (no debris says "already exists")
    retry = run(
        "export", "ckpt", "--to", "minari", "--dataset-id", "cartpole-v0", "--env", "CartPole-v1"
    )
    assert retry.returncode == 0, retry.stderr
    assert "exported 4 episodes" in retry.stdout


def test_import_from_a_missing_rlds_directory_is_one_error_line(where):
    done = run("import", "--from", "rlds", "no_such_dir", "--checkpoint-dir", "out")
    assert_one_error_line(done, "'no_such_dir' is not an RLDS/TFDS dataset directory")
    assert written(where) == []


def test_import_of_a_minari_dataset_missing_locally_says_what_to_run(where):
    done = run("import", "--from", "minari", "nosuch/dataset-v0", "--checkpoint-dir", "out")
    assert_one_error_line(done, "is not in the local Minari datasets folder")
    assert "--download" in done.stderr and "minari download nosuch/dataset-v0" in done.stderr
    assert written(where) == []


def test_populate_from_a_missing_dataset_names_minari_download(where):
    done = run("populate", "--env", "CartPole-v1", "--from-dataset", "nosuch/dataset-v0",
               "--capacity", "100", "--steps-per-run", "10", "--num-runs", "1",
               "--checkpoint-dir", "ck", "--no-progress")  # fmt: skip
    assert_one_error_line(done, "Run `minari download nosuch/dataset-v0` first")
    assert "--download" not in done.stderr
    assert written(where) == []


def test_import_with_download_that_fails_is_one_error_line_and_writes_nothing(where):
    # no network here: the hub cannot be reached (or its client is not installed)
    done = run(
        "import", "--from", "minari", "nosuch/dataset-v0", "--checkpoint-dir", "out", "--download"
    )
    assert_one_error_line(done, "cannot load minari dataset 'nosuch/dataset-v0'")
    assert not (where / "out").exists()


def test_download_is_refused_for_rlds(where):
    done = run("import", "--from", "rlds", "x", "--checkpoint-dir", "out", "--download")
    assert_one_error_line(done, "--download works with --from minari only")
