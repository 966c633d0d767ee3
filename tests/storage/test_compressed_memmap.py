"""Compressed values on memmap storage (issue 41): block files, reopen, checkpoints, full disk.

The reference is naive stacked storage: every stacked observation the fake env
produced is kept by its item id (tests/storage/test_frame_store.py's oracle), and
every sample and every stored step is checked against it, through wraparound,
episode ends, deletes, priority updates, flush and reopen.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from frame_stacks import StackingEnvs, check_sample
from recollect.errors import CheckpointError, DiskFullError
from recollect.memory import table_nbytes
from recollect.storage import ZstdCodec

CODECS = ["zstd", "lz4", "zlib"]


def make(directory, num_envs, max_length, k, markers, dtype, codec="zstd", frame=(2, 3), **kw):
    spec = {
        "observation": rc.ArraySpec((*frame, k), dtype),
        "action": rc.ArraySpec((), np.int32),
    }
    spec.update({m: rc.ArraySpec((), bool) for m in markers})
    kw.setdefault("sampler", rc.Prioritized())
    kw.setdefault("sequence_length", 2)
    return rc.ReplayBuffer(
        spec, num_envs * max_length, num_envs, rng=0, storage="memmap", directory=directory,
        frame_stacks={"observation": rc.FrameStack(k, axis=-1)},
        compression={"observation": codec}, **kw,
    )  # fmt: skip


def add(buf, envs, recorded, markers, t):
    obs, is_first, is_last = envs.step()
    step = {"observation": obs, "action": np.arange(buf.num_envs, dtype=np.int32) + t}
    flags = {"is_first": is_first, "is_last": is_last}
    step.update({m: flags[m] for m in markers})
    now = buf.table.index.t
    for e in range(buf.num_envs):
        recorded[int(rc.ids.encode(e, int(now[e])))] = obs[e]
    buf.add_batch(step)


def store_of(buf):
    """The observation's compressed frame store (a DiskSlots on memmap storage)."""
    (ring,) = buf.storage.compressed_rings().values()
    return ring.slots


def check_all(buf, recorded):
    stored = buf.num_frames() // buf.num_envs
    if not stored:
        return
    all_obs = buf.gather_all()["observation"]
    ids = buf.reader.item_ids()
    for e in range(buf.num_envs):
        for j in range(stored):
            np.testing.assert_array_equal(all_obs[e, j], recorded[int(ids[e, j])])


@settings(max_examples=30, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 7),
    k=st.integers(1, 4),
    dtype=st.sampled_from([np.uint8, np.float32]),
    markers=st.sampled_from([("is_last",), ("is_first",), ("is_first", "is_last")]),
    steps=st.integers(1, 30),
    end_prob=st.sampled_from([0.0, 0.2, 0.6]),
    reopen_at=st.one_of(st.none(), st.integers(0, 30)),
    delete_at=st.one_of(st.none(), st.integers(0, 30)),
    codec=st.sampled_from(CODECS),
    seed=st.integers(0, 2**16),
)
def test_samples_equal_env_observations_through_wraparound_deletes_and_reopen(
    num_envs, max_length, k, dtype, markers, steps, end_prob, reopen_at, delete_at, codec, seed
):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "buf"
        args = (num_envs, max_length, k, markers, dtype, codec)
        buf = make(directory, *args)
        envs = StackingEnvs(num_envs, (2, 3), dtype, k, -1, "reset", seed, end_prob)
        recorded, deleted, priorities = {}, set(), {}
        for t in range(steps):
            if t == reopen_at:
                buf.close()
                buf = make(directory, *args)
                check_all(buf, recorded)
            if t == delete_at and buf.table.index.count(2, buf.writer.episode_aware):
                s = buf.sample(2)
                buf.delete(s.ids[:1])
                deleted.add(int(s.ids[0]))
                buf.update_priorities(s.ids[1:], np.full(len(s.ids) - 1, 5.0))
                priorities[int(s.ids[1])] = 5.0
            add(buf, envs, recorded, markers, t)
        check_all(buf, recorded)
        if buf.table.index.count(2, buf.writer.episode_aware) > len(deleted):
            s = check_sample(buf, recorded, 16, 2)
            assert not deleted & {int(i) for i in s.ids}
            for i, p in zip(s.ids, s.priorities, strict=True):
                assert p == pytest.approx(priorities.get(int(i), p))
        buf.close()


def test_block_file_stops_growing_once_the_ring_wraps(tmp_path):
    """Blocks are recycled as the ring overwrites: the file holds the live compressed bytes
    within the stated factor and does not grow from the second wrap on."""
    rng = np.random.default_rng(0)
    buf = make(tmp_path / "b", 4, 1024, 4, ("is_first",), np.uint8, frame=(32, 32))
    store = store_of(buf)
    sizes = []
    for wrap in range(5):
        for _ in range(1024):
            obs = rng.integers(0, 255, (4, 32, 32, 4), np.uint8)  # incompressible: ~1 KiB
            buf.add_batch({"observation": obs, "action": np.zeros(4, np.int32),
                           "is_first": np.zeros(4, bool)})  # fmt: skip
        sizes.append(store.arena.disk_bytes)
        live = store.stored_bytes
        assert store.arena.disk_bytes <= 1.5 * live + 4 * store.arena.block_bytes, wrap
    assert sizes[1] == sizes[-1]
    assert (tmp_path / "b" / "compressed-frames_2-g0.blocks").stat().st_size == sizes[-1]


def test_dictionary_training_writes_a_new_generation_that_reopens(tmp_path):
    codec = ZstdCodec(train_values=16)
    env = StackingEnvs(2, (16, 16), np.uint8, 4, -1, "reset", 3, 0.1)
    env.rng = np.random.default_rng(3)
    recorded = {}
    args = (2, 32, 4, ("is_first",), np.uint8, codec, (16, 16))
    buf = make(tmp_path / "d", *args)
    for t in range(80):
        add(buf, env, recorded, ("is_first",), t)
    store = store_of(buf)
    assert store.dictionary is not None
    pointer = json.loads((tmp_path / "d" / "compressed-frames_2.json").read_text())
    assert pointer["generation"] == 1 and "dictionary_sha256" in pointer
    assert not list((tmp_path / "d").glob("compressed-frames_2-g0*"))
    buf.close()
    buf = make(tmp_path / "d", *args)
    assert store_of(buf).dictionary == store.dictionary
    check_all(buf, recorded)
    for t in range(80, 120):
        add(buf, env, recorded, ("is_first",), t)
    check_all(buf, recorded)


def test_a_tampered_dictionary_is_refused_on_reopen(tmp_path):
    args = (2, 32, 4, ("is_first",), np.uint8, ZstdCodec(train_values=16), (16, 16))
    buf = make(tmp_path / "d", *args)
    env = StackingEnvs(2, (16, 16), np.uint8, 4, -1, "reset", 3, 0.1)
    for t in range(40):
        add(buf, env, {}, ("is_first",), t)
    buf.close()
    path = tmp_path / "d" / "compressed-frames_2-g1.dict"
    path.write_bytes(b"x" + path.read_bytes()[1:])
    with pytest.raises(CheckpointError, match="is not the dictionary its values were encoded"):
        make(tmp_path / "d", *args)


@pytest.mark.parametrize("into", ["memmap", "numpy"])
def test_checkpoint_keeps_compressed_bytes_and_restores_exactly(tmp_path, into):
    env = StackingEnvs(2, (8, 8), np.uint8, 4, -1, "reset", 5, 0.2)
    recorded = {}
    buf = make(tmp_path / "src", 2, 16, 4, ("is_first", "is_last"), np.uint8, frame=(8, 8))
    for t in range(40):
        add(buf, env, recorded, ("is_first", "is_last"), t)
    first = buf.sample(8, 2).ids
    picked = np.unique(first)[:2]
    assert buf.update_priorities(picked, [3.0, 4.0][: len(picked)]) == 0
    buf.save(tmp_path / "ckpt")
    kw = {"storage": into, "directory": tmp_path / "dst" if into == "memmap" else None}
    spec = buf.data_spec
    other = rc.ReplayBuffer(
        spec, 32, 2, sampler=rc.Prioritized(), sequence_length=2,
        frame_stacks={"observation": rc.FrameStack(4, axis=-1)},
        compression={"observation": "zstd"}, **kw,
    )  # fmt: skip
    other.load_state_dict(rc.ReplayBuffer.load(tmp_path / "ckpt").state_dict())
    np.testing.assert_array_equal(other.reader.item_ids(), buf.reader.item_ids())
    check_all(other, recorded)
    mine = store_of(buf).state_dict()
    theirs = store_of(other).state_dict()
    from recollect.storage.compression.compressed import joined_state

    def as_ram(state):
        return joined_state(state) if "blocks" in state else state

    a, b = as_ram(mine), as_ram(theirs)
    np.testing.assert_array_equal(a["bytes"], b["bytes"])  # the same compressed bytes
    np.testing.assert_array_equal(a["lengths"], b["lengths"])
    s = other.sample(64, 2)
    assert set(np.round(s.priorities, 9)) <= {1.0, 3.0, 4.0}
    assert 3.0 in set(np.round(s.priorities, 9))


def test_full_disk_raises_before_anything_is_written(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    buf = make(tmp_path / "f", 4, 4096, 4, ("is_first",), np.uint8, frame=(32, 32))

    def step():
        obs = rng.integers(0, 255, (4, 32, 32, 4), np.uint8)
        return {"observation": obs, "action": np.zeros(4, np.int32), "is_first": np.zeros(4, bool)}

    real = os.posix_fallocate

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    blocks = store_of(buf).arena
    size = blocks.disk_bytes
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(DiskFullError, match=r"compressed-frames_2-g0.blocks needs \d+ bytes"):
        for _ in range(4096):
            buf.add_batch(step())
    ids, data = buf.reader.item_ids(), buf.gather_all()
    assert blocks.disk_bytes == size
    with pytest.raises(DiskFullError):
        buf.add_batch(step())
    np.testing.assert_array_equal(buf.reader.item_ids(), ids)
    np.testing.assert_array_equal(buf.gather_all()["observation"], data["observation"])
    monkeypatch.setattr(os, "posix_fallocate", real)
    buf.add_batch(step())
    assert buf.num_frames() == len(ids.reshape(-1)) + 4


def test_plain_leaf_compression_on_memmap_reopens(tmp_path):
    spec = {"image": rc.ArraySpec((6, 6), np.uint8), "is_last": rc.ArraySpec((), bool)}
    kw = {"storage": "memmap", "directory": tmp_path / "p", "compression": {"image": "lz4"}}
    buf = rc.ReplayBuffer(spec, 8, 2, **kw)
    images = np.arange(12 * 2 * 36, dtype=np.uint8).reshape(12, 2, 6, 6)
    for t in range(12):
        buf.add_batch({"image": images[t], "is_last": np.zeros(2, bool)})
    buf.close()
    buf = rc.ReplayBuffer(spec, 8, 2, **kw)
    np.testing.assert_array_equal(buf.gather_all()["image"], images[8:].swapaxes(0, 1))


def test_estimate_memory_separates_ram_and_disk(tmp_path):
    spec = {"observation": rc.ArraySpec((84, 84, 4), np.uint8), "is_first": rc.ArraySpec((), bool)}
    kw = {
        "frame_stacks": {"observation": rc.FrameStack(4)},
        "compression": {"observation": "zstd"},
        "sampler": rc.Prioritized(),
    }
    disk = rc.estimate_memory(spec, 80_000, 8, "memmap", separate=True, **kw)
    ram = rc.estimate_memory(spec, 80_000, 8, "numpy", separate=True, **kw)
    total = rc.estimate_memory(spec, 80_000, 8, "memmap", **kw)
    assert disk.ram + disk.disk == total == ram.ram
    assert ram.disk == 0
    assert disk.ram == table_nbytes(8, 10_000, rc.Prioritized(), False)  # the table only
    assert disk.disk > 80_000 * 12  # the offset index and blocks live in files
    buf = rc.ReplayBuffer(spec, 80_000, 8, storage="memmap", directory=tmp_path / "e",
                          sequence_length=2, **kw)  # fmt: skip
    assert buf.nbytes == total
    assert buf.table.nbytes == disk.ram


@pytest.mark.parametrize(
    "sampler",
    [rc.Uniform(), rc.Prioritized(), rc.samplers.Fifo(), rc.samplers.Lifo(),
     rc.samplers.MaxHeap(), rc.samplers.MinHeap()],
    ids=lambda s: type(s).__name__,
)  # fmt: skip
def test_every_sampler_reads_exact_stacks(tmp_path, sampler):
    env = StackingEnvs(3, (4, 4), np.uint8, 4, -1, "reset", 9, 0.15)
    recorded = {}
    buf = make(tmp_path / "s", 3, 10, 4, ("is_first", "is_last"), np.uint8, frame=(4, 4),
               sampler=sampler)  # fmt: skip
    for t in range(25):
        add(buf, env, recorded, ("is_first", "is_last"), t)
    check_sample(buf, recorded, 16, 2)
    check_all(buf, recorded)


def test_a_served_table_on_disk_samples_what_its_writers_added(tmp_path):
    from recollect.service import Server

    env = StackingEnvs(2, (4, 4), np.uint8, 4, -1, "reset", 4, 0.1)
    buf = make(tmp_path / "t", 2, 16, 4, ("is_first",), np.uint8, frame=(4, 4))
    server = Server({"t": buf})
    client = server.client()
    added = []
    with client.writer("t", 2, chunk_length=3) as writer:
        for t in range(40):
            obs, is_first, _ = env.step()
            added.append(obs)
            writer.add_batch({"observation": obs, "action": np.zeros(2, np.int32) + t,
                              "is_first": is_first})  # fmt: skip
    sample = client.sample("t", 32)
    pool = {a.tobytes() for batch in added for a in batch}
    assert all(o.tobytes() in pool for o in sample.data["observation"].reshape(-1, 4, 4, 4))
    server.close()
    assert list((tmp_path / "t").glob("compressed-*.blocks"))
