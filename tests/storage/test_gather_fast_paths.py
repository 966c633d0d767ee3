"""Fast paths of the core against their plain twins: gathers, recycled output blocks, validation."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import DTypeError, ShapeError, SpecError
from recollect.specs import FlatSpec
from recollect.storage import gather as gather_module
from recollect.storage.gather import ChunkPool, Gatherer
from recollect.validation import _convert_leaves, convert_step

DTYPES = [np.float32, np.int32, np.uint8, np.bool_, np.float16]
SHAPES = [(), (3,), (2, 5), (0,), (4, 4, 2)]


def _views(rng: np.random.Generator, rows: int) -> list[np.ndarray]:
    return [
        (rng.random((rows, *shape)) * 100).astype(dtype)
        for dtype, shape in zip(DTYPES, SHAPES, strict=True)
    ]


@pytest.mark.parametrize("index_shape", [(7,), (5, 3), (1,), (0,), (300,)])
def test_gather_leaves_equals_fancy_indexing(index_shape):
    rng = np.random.default_rng(0)
    views = _views(rng, 50)
    index = rng.integers(0, 50, index_shape)
    for got, view in zip(Gatherer().gather(views, index), views, strict=True):
        np.testing.assert_array_equal(got, view[index])
        assert got.dtype == view.dtype and got.shape == view[index].shape
        assert got.flags.writeable and got.flags.c_contiguous
        assert got.ctypes.data % gather_module.ALIGN_BYTES == 0 or got.size == 0


def test_split_gather_equals_fancy_indexing(monkeypatch):
    monkeypatch.setattr(gather_module, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(gather_module, "CHUNK_BYTES", 64)
    gatherer = Gatherer(threads=3)
    rng = np.random.default_rng(1)
    views = _views(rng, 300)
    for _ in range(20):
        index = rng.integers(0, 300, (64, 2))
        for got, view in zip(gatherer.gather(views, index), views, strict=True):
            np.testing.assert_array_equal(got, view[index])


def test_chunk_pool_runs_every_chunk_once_and_reraises_errors():
    pool = ChunkPool(3)
    for n in (1, 2, 7, 100):
        seen = np.zeros(n, np.int64)

        def mark(a, b, seen=seen):
            seen[a:b] += 1

        pool.run(mark, [n * k // 5 for k in range(6)])
        np.testing.assert_array_equal(seen, 1)

    def fail(a, b):
        if a > 0:
            raise ValueError(f"chunk at {a}")

    with pytest.raises(ValueError, match="chunk at"):
        pool.run(fail, [0, 1, 2, 3])
    pool.stop()


def test_recycled_blocks_never_overwrite_a_sample_still_held():
    spec = {"observation": rc.ArraySpec((64, 64), np.uint8), "is_last": rc.ArraySpec((), bool)}
    buf = rc.ReplayBuffer(spec, 2000, 2, rng=0)
    rng = np.random.default_rng(2)
    for _ in range(1000):
        obs = rng.integers(0, 256, (2, 64, 64), dtype=np.uint8)
        buf.add_batch({"observation": obs, "is_last": np.zeros(2, bool)})
    held = [buf.sample(64, 2) for _ in range(3)]
    copies = [s.data["observation"].copy() for s in held]
    for _ in range(10):  # blocks of dropped samples are recycled, held ones never
        buf.sample(64, 2)
    obs_held = held[1].data["observation"]
    del held[0]
    for _ in range(10):
        buf.sample(64, 2)
    np.testing.assert_array_equal(obs_held, copies[1])
    np.testing.assert_array_equal(held[1].data["observation"], copies[2])
    _, rows, times = rc.ids.decode(held[1].ids)
    stored = buf.gather_all()["observation"]  # lo == 0: column k holds step time k
    np.testing.assert_array_equal(held[1].data["observation"][:, 0], stored[rows, times])
    np.testing.assert_array_equal(held[1].data["observation"][:, 1], stored[rows, times + 1])


def _spec():
    return FlatSpec(
        {
            "a": rc.ArraySpec((3,), np.float32),
            "b": rc.ArraySpec((), np.int32),
            "c": rc.ArraySpec((2,), np.uint8),
        }
    )


def _step(n=4):
    return {
        "a": np.ones((n, 3), np.float32),
        "b": np.arange(n, dtype=np.int32),
        "c": np.zeros((n, 2), np.uint8),
    }


def test_convert_step_fast_path_equals_slow_path():
    flat = _spec()
    step = _step()
    fast = convert_step(flat, step, (4,), "add_batch")
    slow = _convert_leaves(flat, flat.treedef.flatten_up_to(step), (4,), "add_batch")
    assert [x is y for x, y in zip(fast, slow, strict=True)] == [True, True, True]
    cast = dict(step, b=np.arange(4, dtype=np.int16))  # safe cast still happens
    out = convert_step(flat, cast, (4,), "add_batch")
    assert out[1].dtype == np.int32


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda s: s.pop("b"), SpecError, "missing leaves \\['b'\\]"),
        (lambda s: s.update(d=np.zeros(4)), SpecError, "extra leaves \\['d'\\]"),
        (lambda s: s.update(a=np.ones((5, 3), np.float32)), ShapeError, "leaf 'a'"),
        (lambda s: s.update(b=np.ones(4, np.float64)), DTypeError, "leaf 'b'"),
    ],
)
def test_convert_step_fast_path_still_rejects(change, error, match):
    flat = _spec()
    step = _step()
    change(step)
    with pytest.raises(error, match=match):
        convert_step(flat, step, (4,), "add_batch")
