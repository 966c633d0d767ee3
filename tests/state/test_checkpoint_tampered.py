"""Manifests edited and re-signed (their checksums pass): every damage raises CheckpointError."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError
from recollect.state.manifest import dump_manifest
from recollect.state.npyio import write_array

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}
WHAT_TO_DO = r"(Restore it from a backup|save the buffer again|discard it)"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "ck"
    buf = rc.ReplayBuffer(SPEC, 16, 2, sampler=rc.Prioritized(), sequence_length=2, rng=0)
    for _ in range(5):
        buf.add_batch({"obs": np.ones((2, 3), np.float32), "is_last": np.zeros(2, bool)})
    buf.save(path)
    return path


def _tamper(saved, tmp_path, edit):
    path = tmp_path / "ck"
    shutil.copytree(saved, path)
    manifest = json.loads((path / "manifest.json").read_text())
    edit(path, manifest)
    if (path / "manifest.json").is_file():
        (path / "manifest.json").write_bytes(dump_manifest(manifest))  # a valid checksum
    return path


def _rename_column(new_name):
    def edit(path, manifest):
        ref = manifest["state"]["storage"]["columns"]["leaf-001-obs"]
        manifest["files"][new_name] = manifest["files"].pop(ref["__columns__"])
        ref["__columns__"] = new_name

    return edit


def _manifest_is_a_directory(path, manifest):
    (path / "manifest.json").unlink()
    (path / "manifest.json").mkdir()


def _files_not_a_dict(path, manifest):
    manifest["files"] = [1, 2]


def _file_entry_not_a_dict(path, manifest):
    manifest["files"][next(iter(manifest["files"]))] = "crc32:0"


def _table_not_a_dict(path, manifest):
    manifest["state"]["table"] = [1]


def _sampler_not_a_dict(path, manifest):
    manifest["state"]["table"]["sampler"] = 5


def _config_sampler_not_a_dict(path, manifest):
    manifest["config"]["sampler"] = "Uniform"


def _nan_max_priority(path, manifest):
    manifest["state"]["table"]["sampler"]["max_priority"] = float("nan")


def _nan_priority_value(path, manifest):
    name = manifest["state"]["table"]["sampler"]["values"]["__file__"]
    values = np.load(path / name)
    values[0] = np.nan
    (path / name).unlink()
    checksum, size = write_array(path / name, values)
    manifest["files"][name] = {"checksum": checksum, "size_bytes": size}


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (_manifest_is_a_directory, r"manifest.json: cannot be read"),
        (_rename_column(""), r"invalid file name ''"),
        (_rename_column("leaf\0obs.npy"), r"invalid file name 'leaf\\x00obs.npy'"),
        (_files_not_a_dict, r"is not listed with a checksum"),
        (_file_entry_not_a_dict, r"is not listed with a checksum"),
        (_table_not_a_dict, r"cannot restore the buffer state"),
        (_sampler_not_a_dict, r"cannot restore the buffer state"),
        (_config_sampler_not_a_dict, r"inconsistent buffer description"),
        (_nan_max_priority, r"field 'max_priority' holds NaN, inf or negative values"),
        (_nan_priority_value, r"field 'values' holds NaN, inf or negative values"),
    ],
)
def test_a_tampered_manifest_with_a_valid_checksum_raises_checkpoint_error(
    saved, tmp_path, edit, match
):
    path = _tamper(saved, tmp_path, edit)
    with pytest.raises(CheckpointError, match=match) as info:
        rc.ReplayBuffer.load(path)
    assert info.match(WHAT_TO_DO)
