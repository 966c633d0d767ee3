"""zstd dictionaries: a store trains one on its first values, re-encodes them, saves it.

Oracles: the values added (every read must return them bit for bit, before,
across and after the training write), an uncompressed twin buffer (same seed:
same samples), and checkpoints (the dictionary travels with the bytes).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from recollect.errors import CheckpointError, InvalidArgumentError
from recollect.storage import compressed as compressed_module
from recollect.storage.compression.codecs import ZstdCodec, codec_from_config, resolve
from recollect.storage.compression.compressed import CompressedSlots

pytest.importorskip("zstandard")


class EagerDictionary(ZstdCodec):
    """Trains after 16 values on a raw-content dictionary (with ``MIN_DICTIONARY_GAIN``
    lowered, small random test values take the dictionary path too)."""

    def __init__(self) -> None:
        super().__init__(train_values=16)

    def train(self, values: np.ndarray) -> bytes | None:
        return values[:4].tobytes() + bytes(range(64))


def _images(rng, n, shape=(24, 24)):
    """Structured images (a few gray levels in blocks, shifted): a dictionary helps."""
    base = np.kron(rng.integers(0, 4, (6, 6)) * 60, np.ones((4, 4))).astype(np.uint8)
    shifts = rng.integers(0, 24, n)
    out = np.stack([np.roll(base, int(s), axis=1) for s in shifts])
    out[:, :2, :6] = rng.integers(0, 255, (n, 2, 6))  # a "score" that differs per value
    return out.reshape(n, *shape)


SPEC = {"image": rc.ArraySpec((24, 24), np.uint8), "is_last": rc.ArraySpec((), bool)}


def _buffer(codec, capacity=400, num_envs=4, **kw):
    return rc.ReplayBuffer(SPEC, capacity, num_envs, rng=0, compression={"image": codec}, **kw)


def _fill(buf, rng, steps, num_envs=4):
    added = []
    for _ in range(steps):
        image = _images(rng, num_envs)
        buf.add_batch({"image": image, "is_last": np.zeros(num_envs, bool)})
        added.append(image)
    return np.stack(added, 1)  # [num_envs, steps, 24, 24]


def test_a_store_trains_once_at_train_values_and_reads_back_exactly():
    codec = ZstdCodec(train_values=64, dictionary_size_bytes=4096)
    buf = _buffer(codec)
    slots = buf.storage.compressed_slots[0]
    rng = np.random.default_rng(0)
    added = _fill(buf, rng, 15)  # 60 values: not yet
    assert slots.dictionary is None
    plain = slots.stored_bytes / 60
    np.testing.assert_array_equal(buf.gather_all()["image"], added)
    added = np.concatenate([added, _fill(buf, rng, 1)], 1)  # 64: trains, re-encodes all
    assert slots.dictionary is not None and len(slots.dictionary) <= 4096
    assert slots.stored_bytes / 64 < 0.9 * plain
    np.testing.assert_array_equal(buf.gather_all()["image"], added)
    trained = slots.dictionary
    added = np.concatenate([added, _fill(buf, rng, 150)], 1)  # wraps the 100-step rows
    assert slots.dictionary == trained  # never trained again
    np.testing.assert_array_equal(buf.gather_all()["image"], added[:, -100:])
    index = slots.arena.nbytes + slots.offsets.nbytes + slots.lengths.nbytes
    assert slots.nbytes == index + len(trained)


def test_values_encoded_before_the_training_are_re_encoded_when_stored():
    """Writers compress outside the table lock: a batch encoded with the plain codec and
    stored after the training is re-encoded with the dictionary."""
    slots = CompressedSlots(
        ZstdCodec(train_values=16, dictionary_size_bytes=2048), 4, 8, (24, 24), np.uint8
    )
    rng = np.random.default_rng(1)
    early = _images(rng, 4)
    prepared = slots.encode(early)  # before the dictionary exists
    for t in range(4):
        slots.store(None, t, _images(rng, 4))
    assert slots.dictionary is not None
    slots.store(None, 5, prepared)
    np.testing.assert_array_equal(slots.load(np.arange(4), np.full(4, 5)), early)
    assert prepared.codec is slots.codec  # the plain codec: re-encoded with the dictionary
    assert slots.lengths[:, 5].sum() < prepared.lengths.sum()


def test_a_dictionary_that_gains_little_is_not_kept():
    rng = np.random.default_rng(2)
    buf = _buffer(ZstdCodec(train_values=32, dictionary_size_bytes=2048))
    for _ in range(20):  # incompressible values: a dictionary cannot help
        image = rng.integers(0, 256, (4, 24, 24), dtype=np.uint8)
        buf.add_batch({"image": image, "is_last": np.zeros(4, bool)})
    assert buf.storage.compressed_slots[0].dictionary is None


def test_no_dictionary_when_disabled_or_values_are_large():
    buf = _buffer(ZstdCodec(train_values=16, dictionary_size_bytes=0))
    _fill(buf, np.random.default_rng(3), 10)
    assert buf.storage.compressed_slots[0].dictionary is None
    assert not ZstdCodec().trains(1 << 20)


def test_checkpoint_keeps_the_dictionary_and_the_restored_buffer_continues(tmp_path):
    codec = ZstdCodec(train_values=32, dictionary_size_bytes=2048)
    buf = _buffer(codec)
    rng = np.random.default_rng(4)
    _fill(buf, rng, 20)
    slots = buf.storage.compressed_slots[0]
    assert slots.dictionary is not None
    buf.save(tmp_path / "ckpt")
    saved = np.load(tmp_path / "ckpt" / "state-storage-compressed_leaves-leaf_0-dictionary.npy")
    assert saved.tobytes() == slots.dictionary
    loaded = rc.ReplayBuffer.load(tmp_path / "ckpt")
    assert loaded.config()["compression"]["image"] == {
        "name": "zstd",
        "level": 1,
        "dictionary_size_bytes": 2048,
        "train_values": 32,
    }
    again = loaded.storage.compressed_slots[0]
    assert again.dictionary == slots.dictionary
    state, restored = slots.state_dict(), again.state_dict()
    np.testing.assert_array_equal(state["bytes"], restored["bytes"])
    np.testing.assert_array_equal(
        buf.sample(32, 2).data["image"], loaded.sample(32, 2).data["image"]
    )
    more = _images(rng, 4)
    for b in (buf, loaded):
        b.add_batch({"image": more, "is_last": np.zeros(4, bool)})
    np.testing.assert_array_equal(buf.gather_all()["image"], loaded.gather_all()["image"])
    assert again.dictionary == slots.dictionary


@pytest.mark.parametrize(("stored", "trains"), [(8, True), (20, False)])
def test_a_restored_store_without_dictionary_trains_only_if_it_had_fewer_values(stored, trains):
    """Format-2 checkpoints hold no dictionary: one with >= train_values values keeps its
    plain values (no re-encode of a full buffer); a younger one trains when it gets there."""
    plain = _buffer(ZstdCodec(dictionary_size_bytes=0))
    rng = np.random.default_rng(5)
    _fill(plain, rng, stored)
    buf = _buffer(ZstdCodec(train_values=48, dictionary_size_bytes=2048))
    buf.storage.load_state_dict(plain.storage.state_dict())  # as a format-2 checkpoint
    slots = buf.storage.compressed_slots[0]
    assert slots.dictionary is None
    _fill(buf, rng, 12)
    assert (slots.dictionary is not None) == trains


def test_clear_keeps_the_dictionary():
    buf = _buffer(ZstdCodec(train_values=32, dictionary_size_bytes=2048))
    rng = np.random.default_rng(6)
    _fill(buf, rng, 10)
    trained = buf.storage.compressed_slots[0].dictionary
    assert trained is not None
    buf.clear()
    added = _fill(buf, rng, 3)
    assert buf.storage.compressed_slots[0].dictionary == trained
    np.testing.assert_array_equal(buf.gather_all()["image"], added)


def test_a_dictionary_in_a_checkpoint_needs_a_dictionary_codec():
    buf = _buffer(ZstdCodec(train_values=32, dictionary_size_bytes=2048))
    _fill(buf, np.random.default_rng(7), 10)
    state = buf.storage.compressed_slots[0].state_dict()
    other = CompressedSlots(resolve("zlib", "image"), 4, 100, (24, 24), np.uint8)
    with pytest.raises(CheckpointError, match="codec 'zlib' takes none"):
        other.load_state_dict({**state, "codec": "zlib"}, "leaf_0")
    slots = CompressedSlots(ZstdCodec(), 4, 100, (24, 24), np.uint8)
    with pytest.raises(CheckpointError, match="dictionary is not uint8 bytes"):
        slots.load_state_dict({**state, "dictionary": np.zeros(3, np.int16)}, "leaf_0")


def test_dictionary_options_are_validated_and_round_trip_through_config():
    with pytest.raises(InvalidArgumentError, match=r"`dictionary_size_bytes` must be 0"):
        ZstdCodec(dictionary_size_bytes=100)
    with pytest.raises(InvalidArgumentError, match=r"`train_values` must be an int in \[16"):
        ZstdCodec(train_values=True)
    with pytest.raises(
        InvalidArgumentError, match=r"codec 'lz4' takes no option \['train_values'\]"
    ):
        resolve({"name": "lz4", "level": 0, "train_values": 5}, "image")
    codec = codec_from_config({"name": "zstd", "level": 3, "train_values": 100})
    assert isinstance(codec, ZstdCodec) and (codec.level, codec.train_values) == (3, 100)
    assert ZstdCodec().config() == {"name": "zstd", "level": 1}


def test_reads_outside_the_lock_stay_exact_while_the_store_trains():
    """A gather outside the table lock sees one consistent (codec, arena, index) version:
    values not being overwritten decode exactly while a write trains and swaps them."""
    slots = CompressedSlots(
        ZstdCodec(train_values=256, dictionary_size_bytes=4096), 8, 64, (24, 24), np.uint8
    )
    rng = np.random.default_rng(8)
    first = _images(rng, 8 * 8).reshape(8, 8, 24, 24)
    for t in range(8):
        slots.store(None, t, first[:, t])
    keys = (np.arange(8)[:, None] * 64 + np.arange(8)).reshape(-1)
    errors, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            got = slots.decode_unique(keys).reshape(8, 8, 24, 24).copy()
            if not np.array_equal(got, first):
                errors.append("a read saw a torn version")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for t in range(8, 40):  # crosses 256 values: trains and swaps the index
            slots.store(None, t, _images(rng, 8))
    finally:
        stop.set()
        thread.join()
    assert slots.dictionary is not None
    assert not errors


@settings(max_examples=40, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 12),
    steps=st.integers(1, 30),
    per_row=st.booleans(),
    extend_at=st.one_of(st.none(), st.integers(0, 10)),
    clear_at=st.one_of(st.none(), st.integers(0, 30)),
    seed=st.integers(0, 2**16),
)
def test_dictionary_stores_sample_like_an_uncompressed_twin(
    num_envs, max_length, steps, per_row, extend_at, clear_at, seed
):
    """Every write path (add_batch, rows=, extend) before, across and after the
    training write, with wraparound and clear: same samples as raw storage."""
    spec = {
        "observation": rc.ArraySpec((3, 4, 4), np.uint8),
        "image": rc.ArraySpec((5,), np.float32),
        "is_last": rc.ArraySpec((), bool),
    }
    stacks = {"observation": rc.FrameStack(4, axis=-1)}
    comp = {"observation": EagerDictionary(), "image": EagerDictionary()}
    gain, compressed_module.MIN_DICTIONARY_GAIN = compressed_module.MIN_DICTIONARY_GAIN, -1e9
    try:
        _twins(num_envs, max_length, steps, per_row, extend_at, clear_at, seed, spec, stacks, comp)
    finally:
        compressed_module.MIN_DICTIONARY_GAIN = gain


def _twins(num_envs, max_length, steps, per_row, extend_at, clear_at, seed, spec, stacks, comp):
    cap = num_envs * max_length
    a = rc.ReplayBuffer(spec, cap, num_envs, rng=3, frame_stacks=stacks, compression=comp)
    b = rc.ReplayBuffer(spec, cap, num_envs, rng=3, frame_stacks=stacks)
    rng = np.random.default_rng(seed)

    def step(n):
        return {
            "observation": rng.integers(0, 4, (n, 3, 4, 4), dtype=np.uint8) * 50,
            "image": rng.normal(size=(n, 5)).astype(np.float32),
            "is_last": rng.random(n) < 0.15,
        }

    for t in range(steps):
        if clear_at == t:
            a.clear()
            b.clear()
        if extend_at == t:
            block = {k: v.reshape(num_envs, 2, *v.shape[1:]) for k, v in step(2 * num_envs).items()}
            a.extend(block)
            b.extend(block)
        rows = None
        if per_row and num_envs > 1:
            rows = np.sort(rng.choice(num_envs, rng.integers(1, num_envs + 1), replace=False))
        batch = step(num_envs if rows is None else len(rows))
        a.add_batch(batch, rows=rows)
        b.add_batch(batch, rows=rows)
    for row in range(num_envs):
        got, want = a.reader.gather_row(row), b.reader.gather_row(row)
        for key in spec:
            np.testing.assert_array_equal(got[key], want[key])
    if b.table.index.count(2, True):
        sa, sb = a.sample(16, 2), b.sample(16, 2)
        for key in spec:
            np.testing.assert_array_equal(sa.data[key], sb.data[key])


def test_estimate_memory_counts_the_dictionary_given_enough_sample_values():
    """With >= 64 sample values the estimate trains a dictionary on half of them and
    measures it on the rest: near a trained buffer's measured bytes. With fewer it is the
    dictionary-free upper bound."""
    rng = np.random.default_rng(5)
    capacity, envs = 40_000, 4  # >= train_values (2,048) values: the buffer trains; MBs of
    # values, so the arena blocks (1 MiB each) do not hide the difference
    buf = _buffer(ZstdCodec(), capacity=capacity, num_envs=envs)
    _fill(buf, rng, capacity // envs)
    comp = {"image": ZstdCodec()}
    many = {"image": _images(rng, 128), "is_last": np.zeros(128, bool)}
    few = {"image": many["image"][:8], "is_last": np.zeros(8, bool)}
    with_dictionary = rc.estimate_memory(SPEC, capacity, envs, compression=comp, sample_steps=many)
    upper = rc.estimate_memory(SPEC, capacity, envs, compression=comp, sample_steps=few)
    assert with_dictionary < upper
    assert upper > buf.nbytes
    assert abs(with_dictionary - buf.nbytes) <= 0.5 * buf.nbytes
