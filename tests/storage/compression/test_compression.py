"""Compressed storage (``compression={leaf path: codec}``): bit-exact with what was added.

Oracles: the naive FrameStackObservation model of ``tests/frame_stacks.py`` (every
stacked observation the fake envs returned, by item id), and an uncompressed
twin buffer with the same seed (same draws, so samples must be equal leaf for
leaf, including ids and probabilities).
"""

from __future__ import annotations

import platform

import numpy as np
import optree
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import recollect as rc
from frame_stacks import DTYPES, StackingEnvs, check_sample, fill
from recollect.errors import InvalidArgumentError, SpecError, StateError
from recollect.storage.arena import ByteArena
from recollect.storage.compression.codecs import Lz4Codec, ZlibCodec, ZstdCodec

CODECS = ["zstd", "lz4", "zlib"]


def stacked_buffer(num_envs, max_length, k, axis, padding, dtype, markers, codec, **kw):
    shape = [2, 3]
    shape.insert(axis % 3, k)
    spec = {"observation": rc.ArraySpec(tuple(shape), dtype), "action": rc.ArraySpec((), np.int32)}
    spec.update({m: rc.ArraySpec((), bool) for m in markers})
    stack = rc.FrameStack(stack_size=k, axis=axis, padding=padding, contiguous=kw.pop("c", False))
    return rc.ReplayBuffer(
        spec,
        num_envs * max_length,
        num_envs,
        rng=0,
        frame_stacks={"observation": stack},
        compression={"observation": codec},
        **kw,
    )


@settings(max_examples=60, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(1, 7),
    k=st.integers(1, 4),
    axis=st.sampled_from([0, 1, -1]),
    padding=st.sampled_from(["reset", "zero", "custom"]),
    dtype=st.sampled_from(DTYPES),
    markers=st.sampled_from([("is_last",), ("is_first",), ("is_first", "is_last")]),
    steps=st.integers(1, 30),
    end_prob=st.sampled_from([0.0, 0.2, 0.6]),
    num_steps=st.sampled_from([None, 1, 2, 3]),
    clear_at=st.one_of(st.none(), st.integers(0, 30)),
    seed=st.integers(0, 2**16),
    contiguous=st.booleans(),
    codec=st.sampled_from(CODECS),
)
def test_compressed_frame_stacks_equal_env_observations(
    num_envs,
    max_length,
    k,
    axis,
    padding,
    dtype,
    markers,
    steps,
    end_prob,
    num_steps,
    clear_at,
    seed,
    contiguous,
    codec,
):
    pad = np.full((2, 3), 7, dtype) if padding == "custom" else padding
    buf = stacked_buffer(num_envs, max_length, k, axis, pad, dtype, markers, codec, c=contiguous)
    envs = StackingEnvs(num_envs, (2, 3), dtype, k, axis, pad, seed, end_prob)
    recorded = {}
    fill(buf, envs, steps, markers, recorded, clear_at)
    if buf.table.index.count(num_steps or 1, buf.writer.episode_aware):
        s = check_sample(buf, recorded, 16, num_steps)
        assert s.data["observation"].flags.c_contiguous or not contiguous
    all_obs = buf.gather_all()["observation"]
    ids = buf.reader.item_ids()
    for e in range(num_envs):
        for j in range(buf.num_frames() // num_envs):
            np.testing.assert_array_equal(all_obs[e, j], recorded[int(ids[e, j])])


SPEC = {
    "observation": rc.ArraySpec((5, 4), np.float32),
    "image": rc.ArraySpec((6, 6), np.uint8),
    "action": rc.ArraySpec((), np.int64),
    "is_last": rc.ArraySpec((), bool),
}
SAMPLERS = {
    "uniform": lambda: None,
    "prioritized": lambda: rc.Prioritized(),
    "fifo": lambda: rc.Fifo(),
    "lifo": lambda: rc.Lifo(),
}


def _leaves_equal(a, b):
    for x, y in zip(optree.tree_leaves(a), optree.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
        assert np.asarray(x).dtype == np.asarray(y).dtype


def _step(rng, rows, t):
    n = len(rows)
    return {
        "observation": rng.normal(size=(n, 5, 4)).astype(np.float32),
        "image": (rng.integers(0, 3, (n, 6, 6)) * 40).astype(np.uint8),
        "action": np.full(n, t, np.int64),
        "is_last": rng.random(n) < 0.2,
    }


@settings(max_examples=40, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    max_length=st.integers(2, 6),
    steps=st.integers(1, 25),
    sampler=st.sampled_from(sorted(SAMPLERS)),
    codec=st.sampled_from(CODECS),
    per_row=st.booleans(),
    extend_at=st.one_of(st.none(), st.integers(0, 10)),
    seed=st.integers(0, 2**16),
)
def test_compressed_leaves_sample_like_uncompressed_twin(
    num_envs, max_length, steps, sampler, codec, per_row, extend_at, seed
):
    """Every write path, sampler, window and wraparound: same samples as raw storage."""
    kw = {"rng": 3, "sequence_length": None}
    comp = {"observation": codec, "image": codec, "action": codec}  # leaf 0 too
    seq = 2 if sampler != "uniform" else None
    a = rc.ReplayBuffer(
        SPEC,
        num_envs * max_length,
        num_envs,
        sampler=SAMPLERS[sampler](),
        compression=comp,
        **{**kw, "sequence_length": seq},
    )
    b = rc.ReplayBuffer(
        SPEC,
        num_envs * max_length,
        num_envs,
        sampler=SAMPLERS[sampler](),
        **{**kw, "sequence_length": seq},
    )
    rng = np.random.default_rng(seed)
    for t in range(steps):
        if extend_at == t:
            block = _step(rng, range(num_envs * 3), t)
            block = {key: v.reshape(num_envs, 3, *v.shape[1:]) for key, v in block.items()}
            a.extend(block)
            b.extend(block)
        rows = None
        if per_row and num_envs > 1:
            rows = np.sort(rng.choice(num_envs, rng.integers(1, num_envs + 1), replace=False))
        step = _step(rng, range(num_envs) if rows is None else rows, t)
        a.add_batch(step, rows=rows)
        b.add_batch(step, rows=rows)
    for num_steps in (None, 2):
        if seq is not None and num_steps is None:
            continue
        if not b.table.index.count(num_steps or 1, True):
            continue
        sa, sb = a.sample(8, num_steps), b.sample(8, num_steps)
        _leaves_equal(sa.data, sb.data)
        np.testing.assert_array_equal(sa.ids, sb.ids)
    for row in range(num_envs):
        _leaves_equal(a.reader.gather_row(row), b.reader.gather_row(row))


def test_checkpoint_keeps_compressed_bytes(tmp_path):
    stacks = {"observation": rc.FrameStack(4)}
    spec = {
        "observation": rc.ArraySpec((8, 8, 4), np.uint8),
        "image": rc.ArraySpec((6, 6), np.uint8),
        "is_last": rc.ArraySpec((), bool),
    }
    comp = {"observation": "zstd", "image": ZlibCodec(level=6)}
    buf = rc.ReplayBuffer(spec, 60, 3, rng=0, frame_stacks=stacks, compression=comp)
    envs = StackingEnvs(3, (8, 8), np.uint8, 4, -1, "reset", 1, 0.1)
    for _ in range(50):
        obs, _, is_last = envs.step()
        buf.add_batch({"observation": obs, "image": obs[:, :6, :6, 0] // 2, "is_last": is_last})
    stored = buf.storage.state_dict()
    buf.save(tmp_path / "ckpt")
    for part, name in (("compressed_leaves", "leaf_0"), ("compressed_frames", "frames_2")):
        saved = np.load(tmp_path / "ckpt" / f"state-storage-{part}-{name}-bytes.npy")
        np.testing.assert_array_equal(saved, stored[part][name]["bytes"])  # the codec's bytes
    loaded = rc.ReplayBuffer.load(tmp_path / "ckpt")
    assert loaded.config()["compression"] == {
        "image": {"name": "zlib", "level": 6},
        "observation": {"name": "zstd", "level": 1},
    }
    again = loaded.storage.state_dict()
    for part, name in (("compressed_leaves", "leaf_0"), ("compressed_frames", "frames_2")):
        src, dst = stored[part], again[part]
        np.testing.assert_array_equal(src[name]["bytes"], dst[name]["bytes"])
        np.testing.assert_array_equal(src[name]["lengths"], dst[name]["lengths"])
    _leaves_equal(buf.gather_all(), loaded.gather_all())
    _leaves_equal(buf.sample(16, 2).data, loaded.sample(16, 2).data)


def test_arena_reuses_emptied_blocks_so_memory_tracks_compressed_bytes():
    spec = {"image": rc.ArraySpec((64, 64), np.uint8), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(spec, 4000, 8, compression={"image": "zlib"})
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (8, 64, 64), dtype=np.uint8)  # incompressible
    for t in range(5000):  # wraps the ring: old blocks are emptied and reused
        buf.add_batch({"image": np.roll(images, t, axis=1), "is_last": np.zeros(8, bool)})
    slots = buf.storage.compressed_slots[0]
    stored = slots.stored_bytes
    assert stored > 4000 * 64 * 64
    assert slots.arena.nbytes <= stored + 3 * slots.arena.block_bytes
    assert buf.nbytes <= buf.storage.inner.nbytes + stored + 3 * slots.arena.block_bytes + 4000 * 12


def _memory_bytes() -> int | None:
    """RAM + swap: what Linux's heuristic overcommit (mode 0) refuses one allocation beyond;
    None where that check is not what decides."""
    try:
        import resource  # not on Windows

        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        if open("/proc/sys/vm/overcommit_memory").read().strip() != "0":
            return None  # strict or unlimited overcommit: the heuristic is not in play
        if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
            return None  # a capped address space refuses the reservation anyway
        return sum(int(fields[k].split()[0]) * 1024 for k in ("MemTotal", "SwapTotal"))
    except (ImportError, OSError, KeyError, ValueError):
        return None


@pytest.mark.skipif(
    _memory_bytes() is None or platform.machine() not in ("x86_64", "aarch64"),
    reason="needs Linux's heuristic overcommit on x86_64/aarch64",
)
def test_a_worst_case_reservation_beyond_the_machines_memory_is_built_lazily():
    # a 10M-frame image buffer reserves its incompressible worst case (tens of GiB) as
    # address space; np.zeros of it was refused by the overcommit check ("Unable to
    # allocate 67.1 GiB") on a 24 GiB machine
    limit = _memory_bytes()
    assert limit is not None
    frame = 84 * 84 * 4
    capacity = -(-(limit + (4 << 30)) // frame)  # worst case: 4 GiB beyond RAM + swap
    spec = {"observation": rc.ArraySpec((84, 84, 4), np.uint8)}
    buf = rc.ReplayBuffer(spec, capacity, 1, compression={"observation": "zstd"})
    slots = buf.storage.compressed_slots[0]
    assert slots.arena.data.nbytes > limit + (4 << 30)
    obs = np.zeros((1, 84, 84, 4), np.uint8)
    for t in range(20):
        obs[0, t] = t + 1
        buf.add_batch({"observation": obs})
    out = buf.gather_all()["observation"]
    assert out.shape[:2] == (1, 20) and [int(out[0, t, t, 0, 0]) for t in range(20)] == list(
        range(1, 21)
    )
    rss = int(open("/proc/self/statm").read().split()[1]) * 4096
    assert rss < limit  # only the written pages are committed


def test_arena_free_list_and_offsets():
    arena = ByteArena(1 << 16, 1 << 12)
    data = bytes(range(256)) * 20
    lengths = np.full(20, 256, np.int64)
    first = arena.append(data, lengths)  # 5120 bytes: 16 fit the first 4096-byte block
    assert (first[:16] < 4096).all() and (first[16:] >= 4096).all()
    np.testing.assert_array_equal(arena.data[first[3] : first[3] + 256], np.arange(256))
    arena.release(first[:16])  # the first block is empty: back on the free list
    assert arena.blocks_in_use == 1
    again = arena.append(data[: 256 * 17], np.full(17, 256, np.int64))
    # 12 values fill block 1's rest; the other 5 go to the emptied block 0, not a fresh one
    np.testing.assert_array_equal(again // 4096, [1] * 12 + [0] * 5)
    assert arena.nbytes == 2 * 4096
    np.testing.assert_array_equal(arena.data[again[-1] : again[-1] + 256], np.arange(256))


def test_estimate_memory_from_sample_steps_matches_filled_buffer():
    spec = {"image": rc.ArraySpec((84, 84), np.uint8), "is_last": rc.ArraySpec((), bool)}
    rng = np.random.default_rng(0)
    base = np.kron(rng.integers(0, 4, (12, 12)) * 60, np.ones((7, 7))).astype(np.uint8)
    steps = [
        {
            "image": np.stack([np.roll(base, t * 8 + e, 0) for e in range(8)]),
            "is_last": np.zeros(8, bool),
        }
        for t in range(1250)
    ]
    comp = {"image": "zstd"}
    empty = rc.estimate_memory(spec, 8000, 8, compression=comp)
    buf = rc.ReplayBuffer(spec, 8000, 8, compression=comp)
    assert buf.nbytes == empty
    for s in steps:
        buf.add_batch(s)
    estimate = rc.estimate_memory(spec, 8000, 8, compression=comp, sample_steps=steps[0])
    assert abs(estimate - buf.nbytes) <= 0.1 * buf.nbytes + (1 << 20)
    assert buf.nbytes < 8000 * 84 * 84 / 4


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"compression": ["zstd"]}, InvalidArgumentError, r"must be a dict \{leaf path: codec\}"),
        ({"compression": {"image": "snappy"}}, InvalidArgumentError, r"unknown codec 'snappy'"),
        ({"compression": {"image": 3}}, InvalidArgumentError, r"must be a codec name"),
        ({"compression": {"camera": "zstd"}}, SpecError, r"no leaf 'camera'"),
        ({"compression": {"is_last": "zstd"}}, InvalidArgumentError, r"flag leaves stay"),
    ],
)
def test_bad_compression_is_rejected(kwargs, error, match, tmp_path):
    if "directory" in kwargs:
        kwargs = {**kwargs, "directory": tmp_path / "d"}
    spec = {"image": rc.ArraySpec((6, 6), np.uint8), "is_last": rc.ArraySpec((), bool)}
    with pytest.raises(error, match=match):
        rc.ReplayBuffer(spec, 10, **kwargs)


def test_codec_levels_are_validated():
    with pytest.raises(InvalidArgumentError, match=r"zstd `level` must be an int in \[-7, 22\]"):
        ZstdCodec(level=30)
    with pytest.raises(InvalidArgumentError, match=r"lz4 `level` must be an int in \[0, 12\]"):
        Lz4Codec(level=-1)
    with pytest.raises(InvalidArgumentError, match=r"zlib `level` must be an int in \[0, 9\]"):
        ZlibCodec(level=10)


def _torn_buffer(codec):
    spec = {"image": rc.ArraySpec((16, 16), np.uint8), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(spec, 40, 4, compression={"image": codec})
    images = [np.full((4, 16, 16), t, np.uint8) + np.arange(16, dtype=np.uint8) for t in range(6)]
    for image in images:
        buf.add_batch({"image": image, "is_last": np.zeros(4, bool)})
    slots = buf.storage.compressed_slots[0]
    slots.lengths[1, 2] = 3  # a reader sees the new length with the old offset
    return buf, slots, images


@pytest.mark.parametrize("codec", CODECS)
def test_a_torn_value_decodes_as_zeros_and_the_rest_of_the_batch_exactly(codec):
    """A gather outside the lock may read a slot mid-write (its draw is stale and is
    drawn again): that value must not raise, and the others must stay exact."""
    buf, slots, images = _torn_buffer(codec)
    slots._writes += 1  # odd: a write is running while the reader decodes
    got = buf.gather_all()["image"]
    want = np.stack(images, 1)
    assert (got[1, 2] == 0).all()
    mask = np.ones((4, 6), bool)
    mask[1, 2] = False
    np.testing.assert_array_equal(got[mask], want[mask])


@pytest.mark.parametrize("codec", CODECS)
def test_a_value_that_fails_to_decode_with_no_write_running_raises(codec):
    """Under the lock (no write running, none ran during the read) a value that fails to
    decode is damaged data: it raises instead of coming back as zeros."""
    buf, _, _ = _torn_buffer(codec)
    with pytest.raises(
        StateError,
        match=r"compressed leaf_0: stored values failed to decode .* and no write ran "
        r"meanwhile, so the data in memory is damaged; reload the buffer from a checkpoint",
    ):
        buf.gather_all()


@pytest.mark.parametrize("codec", CODECS)
def test_a_write_that_ran_during_a_failed_read_makes_it_a_race_not_an_error(codec):
    """The tolerance needs a write to have run during the read: the sequence number
    moved between the index read and the failure (the codec fails mid-read here)."""
    buf, slots, _ = _torn_buffer(codec)
    inner = slots._index.codec

    class RacedCodec:
        name = inner.name

        def decode_into(self, data, offsets, lengths, out):
            slots._writes += 2  # a whole write ran while this read decoded
            raise ValueError("torn")

    slots._index = slots._index._replace(codec=RacedCodec())
    got = buf.gather_all()["image"]  # no raise: the read raced a write
    assert (got == 0).all()


@pytest.mark.parametrize("codec", CODECS)
def test_n_step_transitions_from_compressed_frames_are_exact(codec):
    spec = {
        "observation": rc.ArraySpec((2, 3, 4), np.uint8),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
        "is_terminal": rc.ArraySpec((), bool),
    }
    stacks = {"observation": rc.FrameStack(4, padding="zero")}
    buf = rc.ReplayBuffer(
        spec, 60, 3, rng=1, frame_stacks=stacks, compression={"observation": codec}
    )
    envs = StackingEnvs(3, (2, 3), np.uint8, 4, -1, "zero", 4, 0.25)
    recorded = {}
    for t in range(45):  # wraps the 20-step rows twice
        obs, _, is_last = envs.step()
        for e in range(3):
            recorded[int(rc.ids.encode(e, t))] = obs[e]
        step = {"observation": obs, "reward": np.ones(3, np.float32)}
        buf.add_batch({**step, "is_last": is_last, "is_terminal": is_last})
    s = buf.sample(64, 4, within_episode=False)
    batch = rc.n_step_transitions(s.data, discount=0.9)
    for b, item in enumerate(s.ids):
        np.testing.assert_array_equal(batch["observation"][b], recorded[int(item)])
        k = int(batch["num_steps"][b])
        np.testing.assert_array_equal(batch["next_observation"][b], recorded[int(item) + k])


def test_writers_of_different_rows_compress_concurrently_and_exactly():
    """Compression runs outside the table lock: writers in several threads (rows=)
    each get their own codec context, and every stored value decodes exactly."""
    import threading

    spec = {"image": rc.ArraySpec((32, 32), np.uint8), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(spec, 4 * 300, 4, compression={"image": "zstd"})
    images = {
        r: np.random.default_rng(r).integers(0, 3, (300, 32, 32), dtype=np.uint8) for r in range(4)
    }

    def writer(row):
        for t in range(300):
            buf.add_batch({"image": images[row][t][None], "is_last": np.zeros(1, bool)}, rows=[row])

    threads = [threading.Thread(target=writer, args=(r,)) for r in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for row in range(4):
        np.testing.assert_array_equal(buf.reader.gather_row(row)["image"], images[row])


@pytest.mark.parametrize("codec", [ZstdCodec(threads=2), Lz4Codec(), ZlibCodec()])
def test_codec_batches_round_trip_on_one_and_several_threads(codec):
    """Encode/decode batches large enough to be split over threads: the chooser tries
    both modes in its first calls; every batch decodes to its values, in order."""
    rng = np.random.default_rng(0)
    for n in [1, 8, 9, 300, 300, 300, 300, 300, 300, 8, 8, 8, 8, 8, 8]:
        values = (rng.integers(0, 4, (n, 500)) * rng.integers(0, 2, (n, 1))).astype(np.uint8)
        data, lengths = codec.encode(values)
        assert lengths.shape == (n,) and lengths.sum() == len(data)
        arena = np.concatenate([np.zeros(5, np.uint8), np.frombuffer(data, np.uint8)])
        offsets = 5 + np.cumsum(lengths) - lengths
        order = rng.permutation(n)  # segments read in any order
        out = np.empty((n, 500), np.uint8)
        codec.decode_into(arena, offsets[order], lengths[order], out)
        np.testing.assert_array_equal(out, values[order])


def test_a_row_never_written_gathers_empty_stacks_like_the_uncompressed_store():
    spec = {"observation": rc.ArraySpec((4, 3, 4), np.uint8), "is_last": rc.ArraySpec((), bool)}
    stacks = {"observation": rc.FrameStack(4)}
    a = rc.ReplayBuffer(spec, 20, 2, frame_stacks=stacks, compression={"observation": "zstd"})
    b = rc.ReplayBuffer(spec, 20, 2, frame_stacks=stacks)
    step = {"observation": np.ones((1, 4, 3, 4), np.uint8), "is_last": np.zeros(1, bool)}
    for buf in (a, b):
        buf.add_batch(step, rows=[0])
    for row in (0, 1):
        _leaves_equal(a.reader.gather_row(row), b.reader.gather_row(row))
