"""Damaged compressed checkpoints whose checksums were signed again (as an attacker, or a
tool that "repairs" a checkpoint, would): each loads with a CheckpointError naming the
leaf and the slot, never as a buffer that samples wrong or all-zero frames.

The manifest's checksums carry no key, so the checks that matter are the ones on the
values themselves: every value is exactly one zstd frame stating the slot size as its
content size and decoding to it, and the dictionary is the one the manifest names.
Each case runs with the native (cffi) batch decoder and with python-zstandard's stream
reader (what users without cffi get).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import CheckpointError
from recollect.state.manifest import dump_manifest
from recollect.state.npyio import write_array
from recollect.storage import ZstdCodec, compressed_parts, zstd_codec
from recollect.storage.compression.zstd_native import native_decoder

zstandard = pytest.importorskip("zstandard")

SIZE = 8 * 8  # bytes of one "image" value
SPEC = {"image": rc.ArraySpec((8, 8), np.uint8), "is_last": rc.ArraySpec((), bool)}
LEAF = "state-storage-compressed_leaves-leaf_0"  # "image" is leaf 0 (keys sorted)


def build(seed: int = 0, steps: int = 30) -> rc.ReplayBuffer:
    """2 env rows, a zstd leaf that trains a dictionary after 16 values."""
    buf = rc.ReplayBuffer(SPEC, 60, 2, rng=seed, compression={"image": ZstdCodec(train_values=16)})
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 4, (8, 8), dtype=np.uint8) * 50
    for _ in range(steps):
        image = np.repeat(base[None], 2, 0).copy()
        image[:, 0, :3] = rng.integers(0, 255, (2, 3))
        buf.add_batch({"image": image, "is_last": np.zeros(2, bool)})
    return buf


@pytest.fixture(params=["native", "stream"])
def decoder(request, monkeypatch):
    """Both zstd decode paths: libzstd via cffi, and python-zstandard's stream reader."""
    if request.param == "native" and native_decoder(None) is None:
        pytest.skip("needs cffi (python-zstandard's cffi backend)")
    if request.param == "stream":
        monkeypatch.setattr(zstd_codec, "native_decoder", lambda dictionary: None)
    return request.param


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("damaged") / "buf"
    buf = build()
    assert buf.storage.compressed_slots[0].dictionary is not None
    buf.save(path)
    return path


def copy(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "buf"
    shutil.copytree(saved, target)
    return target


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def resign(path: Path, arrays: dict[str, np.ndarray], edit=None) -> None:
    """Replaces ``.npy`` files and signs the manifest again (file checksums, own sha256)."""
    body = manifest(path)
    for name, array in arrays.items():
        checksum, size = write_array(path / name, array)
        body["files"][name] = {"checksum": checksum, "size_bytes": size}
    if edit is not None:
        edit(body)
    body.pop("manifest_sha256")
    (path / "manifest.json").write_bytes(dump_manifest(body))


def values(path: Path) -> tuple[list[bytes], np.ndarray]:
    """The saved values of leaf 0 in slot order (row-major) and its lengths."""
    data = np.load(path / f"{LEAF}-bytes.npy").tobytes()
    lengths = np.load(path / f"{LEAF}-lengths.npy")
    flat = lengths.reshape(-1)
    ends = np.cumsum(np.where(flat >= 0, flat, 0))
    out = [data[e - n : e] for e, n in zip(ends.tolist(), flat.tolist(), strict=True) if n >= 0]
    return out, lengths


def replace_value(path: Path, row: int, slot: int, value: bytes) -> None:
    """Puts ``value`` in slot ``(row, slot)`` (a written one) and signs again."""
    parts, lengths = values(path)
    written = np.flatnonzero(lengths.reshape(-1) >= 0)
    key = row * lengths.shape[1] + slot
    parts[int(np.searchsorted(written, key))] = value
    lengths = lengths.copy()
    lengths[row, slot] = len(value)
    data = np.frombuffer(b"".join(parts), np.uint8)
    resign(path, {f"{LEAF}-bytes.npy": data, f"{LEAF}-lengths.npy": lengths})


def frame_at(path: Path, row: int, slot: int) -> bytes:
    parts, lengths = values(path)
    written = np.flatnonzero(lengths.reshape(-1) >= 0)
    return parts[int(np.searchsorted(written, row * lengths.shape[1] + slot))]


def plain_frame(content: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=1, write_content_size=True).compress(content)


def test_an_intact_resigned_checkpoint_loads_and_samples_exactly(saved, tmp_path, decoder):
    """The control: signing again changes nothing that the checks look at."""
    path = copy(saved, tmp_path)
    resign(path, {})
    loaded, fresh = rc.ReplayBuffer.load(path), build()
    np.testing.assert_array_equal(loaded.gather_all()["image"], fresh.gather_all()["image"])


def test_a_value_stating_twice_the_slot_size_is_rejected(saved, tmp_path, decoder):
    path = copy(saved, tmp_path)
    replace_value(path, 1, 4, plain_frame(bytes(range(128))))
    with pytest.raises(
        CheckpointError,
        match=r"leaf_0: the value at row 1, slot 4 is a zstd frame of content size 128 "
        r"bytes; the slot holds 64.*damaged",
    ):
        rc.ReplayBuffer.load(path)


def test_a_truncated_value_is_rejected(saved, tmp_path, decoder):
    path = copy(saved, tmp_path)
    replace_value(path, 0, 7, frame_at(path, 0, 7)[:-1])
    with pytest.raises(CheckpointError, match=r"leaf_0: the value at row 0, slot 7 .*truncated"):
        rc.ReplayBuffer.load(path)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (1 << 20, r"is a zstd frame of content size 1048576 bytes; the slot holds 64"),
        (64 << 20, r"has length \d+; expected -1 or 0 to \d+"),  # longer than any 64 B value
    ],
)
def test_a_zstd_bomb_in_one_slot_is_rejected_without_decoding_it(
    saved, tmp_path, decoder, content, why
):
    path = copy(saved, tmp_path)
    bomb = plain_frame(bytes(content))  # MiBs of zeros in a few bytes per 128 KiB
    assert len(bomb) < 4 << 10
    replace_value(path, 1, 2, bomb)
    with pytest.raises(CheckpointError, match=rf"leaf_0: the value at row 1, slot 2 {why}"):
        rc.ReplayBuffer.load(path)


def test_two_frames_in_one_slot_are_rejected(saved, tmp_path, decoder):
    """Without cffi such a value used to decode into two slots and shift every later one."""
    path = copy(saved, tmp_path)
    replace_value(path, 0, 3, frame_at(path, 0, 3) + frame_at(path, 0, 4))
    with pytest.raises(CheckpointError, match=r"row 0, slot 3 holds bytes after its zstd frame"):
        rc.ReplayBuffer.load(path)


def test_a_frame_with_a_corrupt_block_is_rejected(saved, tmp_path, decoder):
    """Layout intact (header, block sizes), content garbage: only the decode finds it."""
    path = copy(saved, tmp_path)
    frame = bytearray(plain_frame(bytes(np.arange(SIZE, dtype=np.uint8) % 7)))
    header = 6  # magic, descriptor (single segment), 1-byte content size
    block = int.from_bytes(frame[header : header + 3], "little")
    assert (block >> 1) & 3 == 2  # a compressed block
    frame[header + 3 :] = b"\xff" * (len(frame) - header - 3)
    replace_value(path, 1, 9, bytes(frame))
    with pytest.raises(CheckpointError, match=r"row 1, slot 9 fails to decode"):
        rc.ReplayBuffer.load(path)


@pytest.mark.parametrize("length", [-2, 1 << 20])
def test_a_slot_length_out_of_range_is_rejected(saved, tmp_path, length):
    path = copy(saved, tmp_path)
    lengths = np.load(path / f"{LEAF}-lengths.npy").copy()
    lengths[1, 5] = length
    resign(path, {f"{LEAF}-lengths.npy": lengths})
    with pytest.raises(
        CheckpointError, match=rf"row 1, slot 5 has length {length}; expected -1 or 0 to \d+"
    ):
        rc.ReplayBuffer.load(path)


def drop_value(path: Path, name: str, row: int, slot: int) -> None:
    """Marks the written value ``(row, slot)`` of ``name`` never written (length -1) and
    removes its bytes, so every other value stays where its offset says."""
    lengths = np.load(path / f"{name}-lengths.npy").copy()
    data = np.load(path / f"{name}-bytes.npy")
    flat = lengths.reshape(-1)
    ends = np.cumsum(np.where(flat >= 0, flat, 0))
    key = row * lengths.shape[1] + slot
    assert flat[key] >= 0
    start = int(ends[key] - flat[key])
    kept = np.concatenate([data[:start], data[int(ends[key]) :]])
    lengths[row, slot] = -1
    resign(path, {f"{name}-bytes.npy": kept, f"{name}-lengths.npy": lengths})


def test_a_stored_step_whose_value_is_marked_never_written_is_rejected(saved, tmp_path):
    """Length -1 with the bytes removed is a consistent store (every check of the values
    passes), but the step is stored: it would sample as zeros."""
    path = copy(saved, tmp_path)
    drop_value(path, LEAF, 1, 5)
    with pytest.raises(
        CheckpointError,
        match=r"leaf_0: the value at row 1, slot 5 is never written but holds the stored step "
        r"at time 5 \(1 such values\)",
    ):
        rc.ReplayBuffer.load(path)


def save_frame_stacked(path: Path) -> None:
    """Saves 10 steps of a 2-row buffer whose stacked leaf keeps its frames compressed
    (leaf 1, ``frames_1``)."""
    spec = {"obs": rc.ArraySpec((6, 5, 4), np.uint8), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(
        spec, 30, 2, frame_stacks={"obs": rc.FrameStack(4)}, compression={"obs": "zstd"}
    )
    for t in range(10):
        frame = np.full((2, 6, 5, 1), t, np.uint8)
        buf.add_batch({"obs": np.repeat(frame, 4, -1), "is_last": np.zeros(2, bool)})
    buf.save(path)


def test_a_stored_frame_marked_never_written_is_rejected(tmp_path):
    save_frame_stacked(tmp_path / "buf")
    drop_value(tmp_path / "buf", "state-storage-compressed_frames-frames_1", 0, 3)
    with pytest.raises(CheckpointError, match=r"frames_1: the value at row 0, slot 3 is never"):
        rc.ReplayBuffer.load(tmp_path / "buf")


def test_a_swapped_dictionary_is_rejected(saved, tmp_path, decoder):
    """Another store's dictionary (its frames decode to wrong data or fail): the manifest
    names the dictionary by sha256."""
    path = copy(saved, tmp_path)
    other = build(seed=1).storage.compressed_slots[0].dictionary
    assert other is not None and other != build().storage.compressed_slots[0].dictionary
    resign(path, {f"{LEAF}-dictionary.npy": np.frombuffer(other, np.uint8)})
    with pytest.raises(
        CheckpointError, match=r"leaf_0: its dictionary has sha256 [0-9a-f]{64}; the manifest "
    ):
        rc.ReplayBuffer.load(path)


def test_the_dictionary_digest_is_in_the_manifest(saved):
    entry = manifest(saved)["state"]["storage"]["compressed_leaves"]["leaf_0"]
    dictionary = np.load(saved / f"{LEAF}-dictionary.npy").tobytes()
    assert entry["dictionary_sha256"] == hashlib.sha256(dictionary).hexdigest()


def test_a_checkpoint_without_the_digest_loads_with_the_values_still_checked(
    saved, tmp_path, decoder
):
    """Checkpoints written before the digest (the golden ones) skip that one check; a
    swapped dictionary whose frames no longer decode is still caught by the decode."""
    path = copy(saved, tmp_path)

    def drop(body):
        del body["state"]["storage"]["compressed_leaves"]["leaf_0"]["dictionary_sha256"]

    resign(path, {}, drop)
    np.testing.assert_array_equal(
        rc.ReplayBuffer.load(path).gather_all()["image"], build().gather_all()["image"]
    )
    junk = np.frombuffer(bytes(range(256)) * 8, np.uint8)  # a raw-content "dictionary"
    resign(path, {f"{LEAF}-dictionary.npy": junk})
    with pytest.raises(CheckpointError, match=r"leaf_0: the value at row \d+, slot \d+ fails"):
        rc.ReplayBuffer.load(path)


def test_a_damaged_frame_ring_value_names_its_ring(tmp_path, decoder):
    """Frame-stacked leaves keep their frames in the same kind of store (``frames_i``)."""
    save_frame_stacked(tmp_path / "buf")
    path = tmp_path / "buf"
    name = "state-storage-compressed_frames-frames_1"
    lengths = np.load(path / f"{name}-lengths.npy")
    data = np.load(path / f"{name}-bytes.npy").copy()
    data[: lengths[0, 0]] = np.frombuffer(b"\x00" * int(lengths[0, 0]), np.uint8)
    resign(path, {f"{name}-bytes.npy": data})
    with pytest.raises(CheckpointError, match=r"frames_1: the value at row 0, slot 0 is not"):
        rc.ReplayBuffer.load(path)


RSS_SCRIPT = """
import gc, sys, threading
import numpy as np
import recollect as rc

def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

buf = rc.ReplayBuffer({"obs": rc.ArraySpec((64, 64), np.uint8)}, 50_000, 1, rng=0,
                      compression={"obs": "zstd"})
rng = np.random.default_rng(0)
base = rng.integers(0, 4, (64, 64), dtype=np.uint8)
for _ in range(50):
    block = np.repeat(base[None], 1000, 0)
    block[:, 0, :8] = rng.integers(0, 255, (1000, 8))
    buf.extend({"obs": block[None]})
buf.sample(64)  # the small scratch every thread keeps
gc.collect()
before = rss_mib()
turn, release = threading.Lock(), threading.Event()
done = threading.Semaphore(0)

def sample():  # 40,000 distinct 4 KiB values: 160 MiB decoded; the thread lives on
    with turn:  # one after another: the peak stays one sample's
        assert buf.sample(40_000).data["obs"].shape == (40_000, 64, 64)
    done.release()
    release.wait()

count = int(sys.argv[1])
threads = [threading.Thread(target=sample) for _ in range(count - 1)]
for thread in threads:
    thread.start()
sample_main = buf.sample(40_000)  # and the main thread
del sample_main
for _ in threads:
    done.acquire()
gc.collect()
print(before, rss_mib())
release.set()
for thread in threads:
    thread.join()
"""


@pytest.mark.parametrize("threads", [1, 4])
def test_a_large_sample_gives_its_decode_scratch_back(threads):
    """A thread keeps at most a small decode scratch: after a ``sample(40_000)`` (in each
    of ``threads`` threads) of a buffer holding about 4 MiB compressed, RSS returns to
    within 32 MiB of before (each thread kept 160 MiB). Runs in a fresh process: no other
    test's memory counts."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(threads)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    before, after = map(float, done.stdout.split())
    assert after - before < 32, f"RSS {before:.0f} -> {after:.0f} MiB"


@pytest.mark.parametrize("codec", ["zstd", "lz4", "zlib"])
def test_gathers_outside_the_lock_racing_writes_never_raise_and_fresh_ones_are_exact(
    codec, monkeypatch
):
    """The one tolerated failure, with real threads: readers gather outside the lock
    (``Table.is_stale`` protocol) while a writer overwrites the ring and reuses arena
    blocks (4 KiB here, so they are reused within a few writes: measured, lz4 and zlib
    reads then fail to decode hundreds of times per thousand draws). No read raises;
    every read its draw does not call stale is exact (values are never 0)."""
    import threading

    monkeypatch.setattr(compressed_parts, "BLOCK_BYTES", 4096)
    spec = {"image": rc.ArraySpec((16, 16), np.uint8), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(spec, 64, 2, rng=0, compression={"image": codec})
    noise = np.random.default_rng(0).integers(0, 2, (500, 2, 16, 16), dtype=np.uint8)

    def step(t: int) -> dict:
        return {"image": noise[t % 500] + np.uint8(t % 200 + 1), "is_last": np.zeros(2, bool)}

    for t in range(64):
        buf.add_batch(step(t))
    stop, errors = threading.Event(), []

    def write() -> None:
        t = 64
        while not stop.is_set():
            buf.add_batch(step(t))
            t += 1

    writer = threading.Thread(target=write)
    writer.start()
    fresh = 0
    try:
        for _ in range(1000):
            draw = buf.table.draw(32)
            try:
                got = buf.reader.gather(draw).data["image"]
            except Exception as err:  # any raise is the failure
                errors.append(err)
                break
            if not buf.table.is_stale(draw):
                fresh += 1
                assert (got.reshape(32, -1).min(1) >= 1).all()
    finally:
        stop.set()
        writer.join()
    assert not errors, errors[0]
    assert fresh > 0


@pytest.mark.parametrize("codec", ["lz4", "zlib"])
def test_other_codecs_values_that_do_not_decode_are_rejected_at_load(codec, tmp_path):
    """lz4 and zlib have no frame headers to read: the batch decode at load finds the value."""
    buf = rc.ReplayBuffer(SPEC, 60, 2, rng=0, compression={"image": codec})
    for t in range(12):
        image = np.full((2, 8, 8), t, np.uint8) + np.arange(8, dtype=np.uint8)
        buf.add_batch({"image": image, "is_last": np.zeros(2, bool)})
    path = tmp_path / "buf"
    buf.save(path)
    replace_value(path, 1, 6, frame_at(path, 1, 6)[:-2])
    with pytest.raises(
        CheckpointError, match=r"leaf_0: the value at row 1, slot 6 fails to decode"
    ):
        rc.ReplayBuffer.load(path)
