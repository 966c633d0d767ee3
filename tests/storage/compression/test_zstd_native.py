"""The native zstd batch decoder (libzstd through python-zstandard's cffi backend).

Oracles: the values encoded (every decode returns them bit for bit) and the
stream-reader path (python-zstandard's C backend), which must agree with the
native path on every batch, with and without a dictionary, on one thread
and split over several.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pinned_chooser import Pinned
from recollect.storage import zstd_codec
from recollect.storage.compression.codecs import ZstdCodec
from recollect.storage.compression.zstd_native import CallerShare, NativeDecoder, native_decoder

pytest.importorskip("zstandard")

needs_native = pytest.mark.skipif(
    native_decoder(None) is None, reason="needs cffi (python-zstandard's cffi backend)"
)


def _values(rng: np.random.Generator, n: int, size: int = 700) -> np.ndarray:
    """Compressible values: a few gray levels in runs, each row shifted."""
    base = np.repeat(rng.integers(0, 5, size // 20 + 1) * 50, 20)[:size].astype(np.uint8)
    return np.stack([np.roll(base, int(s)) for s in rng.integers(0, size, n)])


def _codec(dictionary: bool, values: np.ndarray, threads: int = 2) -> ZstdCodec:
    codec = ZstdCodec(threads=threads)
    if dictionary:
        trained = codec.train(values[:200])
        assert trained is not None
        codec = codec.with_dictionary(trained)
    return codec


def _force(codec: ZstdCodec, split: bool) -> None:
    codec._chooser = Pinned(split)  # type: ignore[assignment]


def _arena(codec: ZstdCodec, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data, lengths = codec.encode(values)
    arena = np.concatenate([np.full(7, 255, np.uint8), np.frombuffer(data, np.uint8)])
    return arena, 7 + np.cumsum(lengths) - lengths, lengths


def test_the_cffi_backend_is_available_with_the_compression_extra():
    """``recollect[compression]`` installs cffi, so the fast path is the one users get."""
    pytest.importorskip("cffi")
    assert isinstance(native_decoder(None), NativeDecoder)


@needs_native
@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 400),
    dictionary=st.booleans(),
    split=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_native_and_stream_paths_decode_every_batch_exactly(n, dictionary, split, seed):
    rng = np.random.default_rng(seed)
    values = _values(rng, 400)
    codec = _codec(dictionary, values)
    arena, offsets, lengths = _arena(codec, values)
    keys = rng.integers(0, len(values), n)  # any order, repeats allowed
    _force(codec, split)
    assert codec._native_decoder() is not None
    native = np.empty((n, values.shape[1]), np.uint8)
    codec.decode_into(arena, offsets[keys], lengths[keys], native)
    np.testing.assert_array_equal(native, values[keys])
    codec._native = None  # the stream reader's path
    stream = np.empty_like(native)
    codec.decode_into(arena, offsets[keys], lengths[keys], stream)
    np.testing.assert_array_equal(stream, native)


def test_a_codec_without_the_cffi_backend_falls_back_to_the_stream_reader(monkeypatch):
    monkeypatch.setattr(zstd_codec, "native_decoder", lambda dictionary: None)
    rng = np.random.default_rng(1)
    values = _values(rng, 300)
    codec = _codec(True, values)
    arena, offsets, lengths = _arena(codec, values)
    out = np.empty_like(values)
    codec.decode_into(arena, offsets, lengths, out)
    assert codec._native is None
    np.testing.assert_array_equal(out, values)


@needs_native
@pytest.mark.parametrize("dictionary", [False, True])
def test_corrupt_or_short_frames_raise_value_error(dictionary):
    rng = np.random.default_rng(2)
    values = _values(rng, 220)
    codec = _codec(dictionary, values)
    native = codec._native_decoder()
    assert native is not None
    data, lengths = codec.encode(values[:4])
    out = np.empty((4, values.shape[1]), np.uint8)
    native.decode_into(data, out)
    np.testing.assert_array_equal(out, values[:4])
    with pytest.raises(ValueError, match=r"decoded to .* bytes; expected"):
        native.decode_into(data[: int(lengths[0])], out)  # one frame where four are expected
    broken = bytearray(data)
    broken[4:12] = b"\xff" * 8
    with pytest.raises(ValueError, match="failed to decode"):
        native.decode_into(bytes(broken), out)


def test_several_threads_decode_with_one_codec_at_once():
    """Each thread has its own decompression context; the dictionary is shared."""
    rng = np.random.default_rng(3)
    values = _values(rng, 500)
    codec = _codec(True, values, threads=1)
    arena, offsets, lengths = _arena(codec, values)
    failures: list[BaseException] = []

    def reader(seed: int) -> None:
        local = np.random.default_rng(seed)
        try:
            for _ in range(50):
                keys = local.integers(0, len(values), int(local.integers(1, 100)))
                out = np.empty((len(keys), values.shape[1]), np.uint8)
                codec.decode_into(arena, offsets[keys], lengths[keys], out)
                np.testing.assert_array_equal(out, values[keys])
        except BaseException as err:  # reported by the main thread
            failures.append(err)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[0]


@needs_native
def test_split_decodes_give_the_caller_the_larger_chunk(monkeypatch):
    """A split has one chunk per thread; the caller's is larger by the workers' measured
    start delay, and a worker's chunk never shrinks below n // (4 T) values."""
    rng = np.random.default_rng(4)
    values = _values(rng, 300)
    codec = _codec(False, values)
    arena, offsets, lengths = _arena(codec, values)
    seen: list[list[int]] = []
    run = codec._pool.run
    monkeypatch.setattr(codec._pool, "run", lambda fn, b: (seen.append(b), run(fn, b)))
    _force(codec, True)
    share = codec._share
    share.value_s, share.wake_s, share.weight = 1e-6, 40e-6, 0.0  # fixed: no learning
    for n in (64, 160, 300):
        out = np.empty((n, values.shape[1]), np.uint8)
        codec.decode_into(arena, offsets[:n], lengths[:n], out)
        np.testing.assert_array_equal(out, values[:n])
    assert seen == [[0, 52, 64], [0, 100, 160], [0, 170, 300]]
    share.wake_s = 1.0  # a worker that never comes in time: it keeps its smallest share
    assert share.bounds(300, 2) == [0, 263, 300]
    assert share.bounds(300, 4) == [0, 282, 288, 294, 300]


def test_caller_share_learns_the_delay_and_the_value_time():
    share = CallerShare(wake_s=0.0, weight=0.5)
    assert share.bounds(100, 2) == [0, 50, 100]  # nothing measured: even halves
    share.record_values(1e-3, 100)  # 10 us per value
    share.record_wake(200e-6)  # averaged with 0: 100 us, 10 values ahead
    assert share.value_s == pytest.approx(10e-6) and share.wake_s == pytest.approx(100e-6)
    assert share.bounds(100, 2) == [0, 55, 100]
    assert share.bounds(90, 3) == [0, 36, 63, 90]
