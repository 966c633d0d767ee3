"""``recollect import --from reverb DIR``: a dm-reverb checkpoint's episodes into a buffer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import recollect as rc
from recollect.cli import main
from recollect.datasets.reverb import from_reverb
from recollect.errors import InvalidArgumentError

FIXTURES = Path(__file__).parents[1] / "fixtures"
SHARED = FIXTURES / "reverb_checkpoint_v0.14"
OURS = FIXTURES / "reverb_v0.14_tables"


def written_episodes() -> dict[int, dict[int, dict[str, str]]]:
    """episode -> step -> leaf path -> that step's bytes (hex), from expected.json."""
    out: dict[int, dict[int, dict[str, str]]] = {}
    for item in json.loads((SHARED / "expected.json").read_text())["tables"][0]["items"]:
        for k, step in enumerate(item["steps"]):
            for path, leaf in item["data"]["leaves"].items():
                width = len(leaf["hex"]) // leaf["shape"][0]
                chunk = leaf["hex"][k * width : (k + 1) * width]
                out.setdefault(item["episode"], {}).setdefault(step, {})[path] = chunk
    return out


def test_import_restores_every_step_of_every_episode(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "import",
            "--from",
            "reverb",
            str(SHARED / "checkpoint"),
            "--checkpoint-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "30 steps" in result.output
    buf = rc.load_buffer(tmp_path / "replay-buffer")
    stored = buf.reader.gather_row(0)
    episodes = written_episodes()
    assert buf.num_frames() == 30 == sum(len(e) for e in episodes.values())
    for episode in range(3):  # oldest first, 10 steps each
        for step in range(10):
            t = 10 * episode + step
            for path, want in episodes[episode][step].items():
                got = np.ascontiguousarray(getattr(stored, path)[t]).tobytes().hex()
                assert got == want, (episode, step, path)
    assert stored.observation.shape == (30, 4) and stored.action.dtype == np.int64


def test_import_names_a_table():
    """The queue's 4 remaining items are steps 0-3 of one episode (one step each)."""
    want = next(
        t
        for t in json.loads((OURS / "expected.json").read_text())["tables"]
        if t["name"] == "queue"
    )
    buf = from_reverb(OURS / "checkpoint", table="queue")
    assert buf.num_frames() == 4
    got = buf.reader.gather_row(0)["x"]
    assert got.tobytes().hex() == "".join(i["data"][0]["hex"] for i in want["items"])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (None, r"holds 4 tables .*name the one to import"),
        ("nope", r"has no table 'nope'"),
        ("heap", r"'heap' cannot be imported as episodes: column 'small' has no time dimension"),
        ("delta", r"'delta' cannot be imported as episodes: it has no signature"),
        ("prioritized", r"'prioritized' cannot .*column 'text' holds strings"),
    ],
)
def test_refusals(table, message):
    with pytest.raises(InvalidArgumentError, match=message):
        from_reverb(OURS / "checkpoint", table=table)


def test_cli_refusal_is_one_error_line(tmp_path):
    args = ["import", "--from", "reverb", str(OURS / "checkpoint"), "--table", "heap"]
    result = CliRunner().invoke(main, [*args, "--checkpoint-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: Reverb table 'heap' cannot be imported")
    assert not (tmp_path / "replay-buffer").exists()
    result = CliRunner().invoke(
        main, ["import", "--from", "reverb", str(tmp_path), "--checkpoint-dir", str(tmp_path)]
    )
    assert result.exit_code == 1 and "no Reverb checkpoint here" in result.output
    result = CliRunner().invoke(
        main,
        ["import", "--from", "rlds", str(tmp_path), "--table", "x", "--checkpoint-dir", "d"],
    )
    assert result.exit_code == 2 and "--table works with --from reverb only" in result.output


def test_refuses_an_episode_with_a_missing_step(tmp_path):
    import shutil
    import zlib

    from recollect.state.reverb import find_checkpoint
    from recollect.state.reverb.tfrecord import masked_crc32c, read_records

    root = tmp_path / "ck"
    shutil.copytree(SHARED / "checkpoint", root)
    directory = find_checkpoint(root)
    assert directory is not None
    (directory / "items.tfrecord").chmod(0o644)
    records = read_records(directory / "items.tfrecord")
    del records[3:5]  # episode 0's windows [3, 4] and [4, 5]: step 4 is in no item
    out = bytearray()
    for record in records:
        head = len(record).to_bytes(8, "little")
        out += head + masked_crc32c(head).to_bytes(4, "little")
        out += record + masked_crc32c(record).to_bytes(4, "little")
    (directory / "items.tfrecord").write_bytes(zlib.compress(bytes(out)))
    with pytest.raises(InvalidArgumentError, match=r"episode \d+ has no item holding its step 4"):
        from_reverb(root)
