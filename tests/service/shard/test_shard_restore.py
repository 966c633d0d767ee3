"""An embedded service restores through the one checkpoint resolution, and checks its
counters file (issue 23, items 2 and 9).

A save killed between its two renames leaves ``shard-K`` missing and complete
``shard-K.old-<token>`` / ``shard-K.tmp-<pid>-<token>`` siblings
(:mod:`recollect.state.atomic`); a shard opening there must restore what
``ReplayBuffer.load`` restores, not come back empty.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError
from recollect.service import Server
from recollect.service.shard.counters import KEY
from service_checkpoints import MARKER, SPEC, service_checkpoint, steps


def kill_between_renames(shard: Path, newer: Path | None = None) -> None:
    """``shard`` as a save killed after ``shard -> shard.old-<token>`` leaves it (and, with
    ``newer``, its complete ``shard.tmp-<pid>-<token>`` beside it)."""
    token = (shard / MARKER).read_text().strip()
    os.rename(shard, shard.with_name(f"{shard.name}.old-{token}"))
    if newer is not None:
        token = (newer / MARKER).read_text().strip()
        os.rename(newer, shard.with_name(f"{shard.name}.tmp-4242-{token}"))


def reopened(directory: Path) -> rc.TableInfo:
    with Server({"t": rc.ReplayBuffer(SPEC, 64, 2)}, checkpoint_dir=directory) as server:
        return server.client().info("t")


def test_a_shard_restores_the_checkpoint_an_interrupted_save_left(tmp_path):
    service_checkpoint(tmp_path, 20)
    shard = tmp_path / "t" / "shard-0"
    assert len(rc.ReplayBuffer.load(shard)) == 20
    kill_between_renames(shard)
    assert len(rc.ReplayBuffer.load(shard)) == 20  # what load reads, the shard restores
    info = reopened(tmp_path)
    assert (info.num_stored, info.lost_steps) == (20, 0)
    # its next checkpoint keeps the data (the interrupted save is finished, not discarded)
    with Server({"t": rc.ReplayBuffer(SPEC, 64, 2)}, checkpoint_dir=tmp_path) as server:
        server.client().checkpoint()
    assert len(rc.ReplayBuffer.load(shard)) == 20
    assert sorted(p.name for p in shard.parent.iterdir()) == ["shard-0", "shard-0.counters"]


def test_a_shard_restores_the_newest_of_two_complete_siblings(tmp_path):
    service_checkpoint(tmp_path / "old", 10)
    service_checkpoint(tmp_path / "new", 20)
    directory = tmp_path / "old"
    newer = tmp_path / "staged"
    shutil.copytree(tmp_path / "new" / "t" / "shard-0", newer)
    kill_between_renames(directory / "t" / "shard-0", newer)
    assert reopened(directory).num_stored == 20


def test_the_manager_and_load_agree_with_the_shard(tmp_path):
    buf = rc.ReplayBuffer(SPEC, 64, 2)
    for k in range(10):
        buf.add_batch(steps(k, 2))
    buf.save(tmp_path / "replay")
    kill_between_renames(tmp_path / "replay")
    manager = rc.ReplayBufferManager(checkpoint_dir=tmp_path / "replay")
    assert manager.has_checkpoint()
    restored, _ = manager.load_replay_buffer()
    assert len(restored) == 20


# -- the counters file (item 9) ----------------------------------------------------------------
def counters_file(directory: Path) -> Path:
    return directory / "t" / "shard-0.counters"


@pytest.mark.parametrize(
    "damage",
    [
        "lost_minus_one",
        "inserts_huge",
        "random_bytes",
        "truncated",
        "longer",
        "zeros",
    ],
)
def test_a_damaged_counters_file_raises_checkpoint_error_naming_it(tmp_path, damage):
    service_checkpoint(tmp_path, 20)
    path = counters_file(tmp_path)
    raw = bytearray(path.read_bytes())
    if damage == "lost_minus_one":
        raw[8:16] = np.int64(-1).tobytes()
        raw[16:24] = np.int64(-1).tobytes()
    elif damage == "inserts_huge":
        raw[0:8] = np.int64(999999999999999).tobytes()
        raw[8:16] = np.int64(999999999999999).tobytes()
    elif damage == "random_bytes":
        raw[:] = np.random.default_rng(0).bytes(len(raw))
    elif damage == "truncated":
        raw = raw[:-3]
    elif damage == "longer":
        raw += b"\0" * 8
    elif damage == "zeros":
        raw[:] = bytes(len(raw))
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"table 't' shard 0: .*shard-0\.counters"):
        reopened(tmp_path)


def test_every_single_damaged_word_is_detected(tmp_path):
    """Negative or absurd values in any word; any change to lost_steps or its check word (the
    insert count may be one insert off its check word: a write cut by a kill)."""
    service_checkpoint(tmp_path, 20)
    path = counters_file(tmp_path)
    good = path.read_bytes()
    for word in range(len(good) // 8):
        for value in (-1, 999999999999999, 7):
            raw = bytearray(good)
            if value == 7 and word in (1, 3):
                continue
            raw[8 * word : 8 * word + 8] = np.int64(value).tobytes()
            path.write_bytes(bytes(raw))
            with pytest.raises(CheckpointError, match=r"shard-0\.counters"):
                reopened(tmp_path)
    path.write_bytes(good)
    assert reopened(tmp_path).lost_steps == 0


def test_counters_count_lost_steps_exactly_and_survive_a_cut_write(tmp_path):
    with Server({"t": rc.ReplayBuffer(SPEC, 64, 2)}, checkpoint_dir=tmp_path) as server:
        client = server.client()
        with client.writer("t", 2) as writer:
            for k in range(10):
                writer.add_batch(steps(k, 2))
        client.checkpoint()
        with client.writer("t", 2) as writer:  # 6 steps after the checkpoint: lost on a crash
            for k in range(3):
                writer.add_batch(steps(k, 2))
    info = reopened(tmp_path)
    assert (info.num_stored, info.lost_steps) == (20, 6)
    # a process killed between the two stores of an insert count: the words differ by one insert
    path = counters_file(tmp_path)
    words = np.frombuffer(path.read_bytes(), np.int64).copy()
    words[1] += 4  # the count written, its check word not yet
    path.write_bytes(words.tobytes())
    info = reopened(tmp_path)
    assert (info.num_stored, info.lost_steps) == (20, 10)
    assert words[3] ^ KEY == 20


def test_a_counters_file_of_the_earlier_layout_still_opens(tmp_path):
    service_checkpoint(tmp_path, 20)
    np.array([26, 3], np.int64).tofile(counters_file(tmp_path))  # [inserts, lost] of before
    info = reopened(tmp_path)
    assert (info.num_stored, info.lost_steps) == (20, 9)
    np.array([-1, 3], np.int64).tofile(counters_file(tmp_path))
    with pytest.raises(CheckpointError, match=r"shard-0\.counters: negative counts"):
        reopened(tmp_path)


def test_a_damaged_shard_checkpoint_names_the_shard_and_the_file(tmp_path):
    service_checkpoint(tmp_path, 20)
    leaf = next((tmp_path / "t" / "shard-0").glob("state-*obs.npy"))
    leaf.write_bytes(leaf.read_bytes()[:-4])
    with pytest.raises(CheckpointError, match=r"table 't' shard 0: .*obs\.npy"):
        reopened(tmp_path)
