"""zstd encoder options (``min_match``, ``raw_literals``) and their choice per store.

Oracles: python-zstandard's own compressor (the native encoder with zstd's
defaults writes the same bytes), the values encoded (every option decodes
them bit for bit, on the native and the stream-reader path), and the rule
of :meth:`ZstdCodec.tuned` recomputed from the sizes of each choice.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from pinned_chooser import Pinned
from recollect.errors import InvalidArgumentError
from recollect.storage import zstd_codec, zstd_native
from recollect.storage.compression.codecs import ZstdCodec, codec_from_config
from recollect.storage.compression.zstd_native import native_decoder, native_encoder

pytest.importorskip("zstandard")

needs_native = pytest.mark.skipif(
    native_decoder(None) is None, reason="needs cffi (python-zstandard's cffi backend)"
)


def _images(rng: np.random.Generator, n: int, side: int = 40) -> np.ndarray:
    """``[n, side * side]`` uint8 frames: one background of 8 gray levels in short runs
    (a dictionary holds it; alone it compresses poorly) and a moving block."""
    background = np.repeat(rng.integers(0, 8, side * side // 2 + 1) * 30, 2)[: side * side]
    frames = np.tile(background.astype(np.uint8), (n, 1)).reshape(n, side, side)
    for i, (y, x) in enumerate(rng.integers(0, side - 6, (n, 2))):
        frames[i, y : y + 6, x : x + 6] = 200 + i % 50
    return frames.reshape(n, side * side)


def _trained(values: np.ndarray) -> ZstdCodec:
    codec = ZstdCodec(threads=1)
    dictionary = codec.train(values[:300])
    assert dictionary is not None
    return codec.with_dictionary(dictionary)


@needs_native
@pytest.mark.parametrize("dictionary", [False, True])
def test_the_native_encoder_with_zstd_defaults_writes_python_zstandards_bytes(dictionary):
    """Same frame parameters (content size, no dictionary id, no checksum): same bytes."""
    values = _images(np.random.default_rng(0), 400)
    codec = _trained(values) if dictionary else ZstdCodec(threads=1)
    encoder = native_encoder(codec.level, codec.dictionary, 0, False)
    assert encoder is not None
    want, want_lengths = codec.encode(values[300:])
    got, lengths = encoder.encode(values[300:])
    assert got == want
    np.testing.assert_array_equal(lengths, want_lengths)


@needs_native
@settings(max_examples=20, deadline=None)
@given(
    min_match=st.sampled_from([0, 3, 4, 5, 6, 7]),
    raw_literals=st.booleans(),
    dictionary=st.booleans(),
    n=st.integers(1, 40),
    seed=st.integers(0, 2**31),
)
def test_every_option_decodes_bit_exact_on_both_decode_paths(
    min_match, raw_literals, dictionary, n, seed
):
    rng = np.random.default_rng(seed)
    values = _images(rng, 300 + n)
    base = _trained(values) if dictionary else ZstdCodec(threads=1)
    codec = base._copy(base.dictionary, min_match, raw_literals)
    data, lengths = codec.encode(values[300:])
    arena = np.frombuffer(data, np.uint8)
    offsets = np.cumsum(lengths) - lengths
    out = np.empty((n, values.shape[1]), np.uint8)
    codec.decode_into(arena, offsets, lengths, out)
    np.testing.assert_array_equal(out, values[300:])
    codec._native = None  # python-zstandard's stream reader decodes them alike
    codec.decode_into(arena, offsets, lengths, out)
    np.testing.assert_array_equal(out, values[300:])


@needs_native
def test_tuned_follows_its_rule_on_the_sizes_of_each_choice():
    values = _images(np.random.default_rng(1), 600)
    codec = _trained(values)
    tuned = codec.tuned(values[:400])
    sample = values[: zstd_native.TUNE_VALUES]

    def size(min_match: int, raw: bool) -> int:
        encoder = native_encoder(codec.level, codec.dictionary, min_match, raw)
        return int(encoder.encode(sample)[1].sum())  # type: ignore[union-attr]

    want_match = 7 if size(7, False) < size(0, False) else 0
    cost = size(want_match, True) / size(want_match, False)
    assert tuned.min_match == want_match
    assert tuned.raw_literals == (cost <= 1 + zstd_native.RAW_LITERALS_MAX_COST)
    assert tuned.dictionary == codec.dictionary
    config = tuned.config()
    assert config["min_match"] == want_match and config["raw_literals"] == tuned.raw_literals
    data, lengths = tuned.encode(values[400:])
    out = np.empty((200, values.shape[1]), np.uint8)
    tuned.decode_into(np.frombuffer(data, np.uint8), np.cumsum(lengths) - lengths, lengths, out)
    np.testing.assert_array_equal(out, values[400:])


@needs_native
def test_tuned_keeps_options_given_and_defaults_small_values():
    values = _images(np.random.default_rng(2), 400)
    given_ = ZstdCodec(min_match=5, raw_literals=False).tuned(values)
    assert (given_.min_match, given_.raw_literals) == (5, False)
    half = ZstdCodec(min_match=4).tuned(values)
    assert half.min_match == 4 and half.raw_literals in (True, False)
    small = ZstdCodec().tuned(values[:, : zstd_native.TUNE_MIN_SIZE - 1])
    assert (small.min_match, small.raw_literals) == (0, False)


def test_without_cffi_tuned_keeps_zstd_defaults_and_options_still_round_trip(monkeypatch):
    monkeypatch.setattr(zstd_native, "_backend", lambda: None)
    monkeypatch.setattr(zstd_codec, "native_decoder", lambda dictionary: None)
    values = _images(np.random.default_rng(3), 400)
    codec = ZstdCodec(threads=1).tuned(values)
    assert (codec.min_match, codec.raw_literals) == (0, False)
    forced = ZstdCodec(min_match=7, raw_literals=True, threads=1)  # e.g. from a checkpoint
    data, lengths = forced.encode(values)
    assert forced._native_encoder() is None  # python-zstandard's compressor, zstd's defaults
    out = np.empty_like(values)
    forced.decode_into(np.frombuffer(data, np.uint8), np.cumsum(lengths) - lengths, lengths, out)
    np.testing.assert_array_equal(out, values)


@pytest.mark.parametrize(
    "kwargs",
    [{"min_match": 2}, {"min_match": 8}, {"min_match": 6.5}, {"raw_literals": 1}],
)
def test_bad_options_raise_with_the_allowed_values(kwargs):
    with pytest.raises(InvalidArgumentError, match=next(iter(kwargs))):
        ZstdCodec(**kwargs)


def test_options_round_trip_through_config():
    codec = ZstdCodec(level=2, min_match=7, raw_literals=True)
    config = codec.config()
    assert config == {"name": "zstd", "level": 2, "min_match": 7, "raw_literals": True}
    again = codec_from_config(config)
    assert (again.min_match, again.raw_literals, again.level) == (7, True, 2)
    assert "min_match" not in ZstdCodec().config()  # defaults stay out of saved configs


@needs_native
def test_a_store_tunes_at_training_and_again_after_restore(tmp_path):
    """The trained codec gets chosen options; a restored buffer chooses again from its
    stored values, so frames added after a restore are encoded alike."""
    rng = np.random.default_rng(4)
    spec = {"image": rc.ArraySpec((40, 40), np.uint8), "is_last": rc.ArraySpec((), bool)}
    codec = ZstdCodec(train_values=64, dictionary_size_bytes=4096)
    buf = rc.ReplayBuffer(spec, 400, 4, rng=0, compression={"image": codec})
    frames = _images(rng, 4 * 50).reshape(50, 4, 40, 40)
    for step in frames:
        buf.add_batch({"image": step, "is_last": np.zeros(4, bool)})
    trained = buf.storage.compressed_slots[0]._index.codec
    assert trained.dictionary is not None
    assert trained.min_match in (0, 7) and trained.raw_literals in (True, False)
    buf.save(tmp_path / "ckpt")
    loaded = rc.ReplayBuffer.load(tmp_path / "ckpt")
    restored = loaded.storage.compressed_slots[0]._index.codec
    assert restored.dictionary == trained.dictionary
    assert restored.min_match in (0, 7) and restored.raw_literals in (True, False)
    more = _images(rng, 4 * 5).reshape(5, 4, 40, 40)
    for step in more:
        loaded.add_batch({"image": step, "is_last": np.zeros(4, bool)})
    np.testing.assert_array_equal(loaded.gather_all()["image"][:, -5:], np.moveaxis(more, 0, 1))


@pytest.mark.parametrize("options", [(None, None), (7, True)])
def test_a_split_encode_writes_the_bytes_of_one_thread_in_order(options):
    """Encodes of >= PARALLEL_MIN_ENCODE values may split over threads; the chunks are
    joined in value order, so the bytes equal a one-thread encode."""
    values = _images(np.random.default_rng(5), 200)
    one = ZstdCodec(threads=1, min_match=options[0], raw_literals=options[1])
    two = ZstdCodec(threads=2, min_match=options[0], raw_literals=options[1])
    two._encode_chooser = Pinned(True)  # type: ignore[assignment]
    n = zstd_codec.PARALLEL_MIN_ENCODE + 37
    data, lengths = two.encode(values[:n])
    want, want_lengths = one.encode(values[:n])
    assert data == want
    np.testing.assert_array_equal(lengths, want_lengths)
    out = np.empty((n, values.shape[1]), np.uint8)
    two.decode_into(np.frombuffer(data, np.uint8), np.cumsum(lengths) - lengths, lengths, out)
    np.testing.assert_array_equal(out, values[:n])
