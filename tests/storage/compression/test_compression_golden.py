"""Golden checkpoints of compressed storage (format 2, committed under tests/golden/compressed).

A compressed leaf is saved as its codec's bytes (``bytes`` uint8, the stored
values back to back in slot order) and ``lengths`` int32 ``[num_envs, slots]``
(-1: never written), under ``storage/compressed_leaves`` (plain leaves) or
``storage/compressed_frames`` (frame-stacked leaves). These files pin that
layout: a change that cannot load them breaks saved buffers.

Regenerate (only when the format version changes):
``python tests/storage/compression/test_compression_golden.py``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.storage import ZstdCodec

GOLDEN = Path(__file__).parents[2] / "golden" / "compressed"
SPEC = {
    "observation": rc.ArraySpec((6, 5, 4), np.uint8),
    "image": rc.ArraySpec((4, 3), np.int16),
    "action": rc.ArraySpec((), np.int32),
    "is_last": rc.ArraySpec((), bool),
}


def build(codec: str) -> tuple[rc.ReplayBuffer, list[dict]]:
    """A 3-env buffer of 30 capacity filled with 14 deterministic steps (the ring wraps)."""
    buf = rc.ReplayBuffer(
        SPEC,
        30,
        3,
        rng=7,
        frame_stacks={"observation": rc.FrameStack(4)},
        compression={"observation": codec, "image": codec},
    )
    frames = [
        (np.arange(3 * 30).reshape(3, 6, 5) * (t + 1) % 251).astype(np.uint8) for t in range(14)
    ]
    steps = []
    for t in range(14):
        stack = np.stack([frames[max(0, t - 3 + p)] for p in range(4)], -1)
        step = {
            "observation": stack,
            "image": (np.arange(36).reshape(3, 4, 3) - 7 * t).astype(np.int16),
            "action": np.arange(3, dtype=np.int32) + t,
            "is_last": np.array([t == 8, False, False]),
        }
        steps.append(step)
        buf.add_batch(step)
    return buf, steps


@pytest.mark.parametrize("codec", ["zlib", "zstd"])
def test_golden_compressed_checkpoint_loads_bit_exact(codec):
    path = GOLDEN / f"replay_{codec}"
    assert (path / "manifest.json").exists(), f"golden checkpoint {path} missing"
    loaded = rc.ReplayBuffer.load(path)
    fresh, _ = build(codec)
    want, got = fresh.gather_all(), loaded.gather_all()
    for key in SPEC:
        np.testing.assert_array_equal(got[key], want[key])
    assert loaded.config()["compression"]["image"]["name"] == codec
    saved = np.load(path / "state-storage-compressed_leaves-leaf_1-bytes.npy")
    np.testing.assert_array_equal(
        saved, fresh.storage.state_dict()["compressed_leaves"]["leaf_1"]["bytes"]
    )
    np.testing.assert_array_equal(
        loaded.sample(8, 2).data["observation"], fresh.sample(8, 2).data["observation"]
    )


def build_dictionary() -> rc.ReplayBuffer:
    """A 3-env buffer of 300 capacity whose zstd leaves trained a dictionary (after 16
    values): 60 deterministic steps of frames and images that repeat patterns."""
    codec = ZstdCodec(train_values=16)
    buf = rc.ReplayBuffer(
        SPEC,
        300,
        3,
        rng=7,
        frame_stacks={"observation": rc.FrameStack(4)},
        compression={"observation": codec, "image": codec},
    )
    rng = np.random.default_rng(0)
    for t in range(60):
        frame = (rng.integers(0, 4, (3, 6, 5, 1)) * 60).astype(np.uint8)
        buf.add_batch(
            {
                "observation": np.repeat(frame, 4, -1),
                "image": (np.arange(36).reshape(3, 4, 3) * (t % 5)).astype(np.int16),
                "action": np.arange(3, dtype=np.int32) + t,
                "is_last": np.array([t == 8, False, False]),
            }
        )
    return buf


def test_golden_checkpoint_with_a_zstd_dictionary_loads_bit_exact():
    """The trained dictionary is saved beside the bytes (``.../leaf_1-dictionary``) and a
    load decodes with it: this pins that entry of the layout."""
    path = GOLDEN / "replay_zstd_dictionary"
    saved = path / "state-storage-compressed_leaves-leaf_1-dictionary.npy"
    assert saved.exists(), f"golden checkpoint {path} has no dictionary entry"
    loaded, fresh = rc.ReplayBuffer.load(path), build_dictionary()
    assert "dictionary" in fresh.storage.state_dict()["compressed_leaves"]["leaf_1"]
    want, got = fresh.gather_all(), loaded.gather_all()
    for key in SPEC:
        np.testing.assert_array_equal(got[key], want[key])
    # the loaded store decodes with the saved dictionary (a fresh one may differ with the
    # zstd library's version; the data may not)
    assert len(np.load(saved)) > 0
    np.testing.assert_array_equal(
        np.load(saved), loaded.storage.state_dict()["compressed_leaves"]["leaf_1"]["dictionary"]
    )
    np.testing.assert_array_equal(
        loaded.sample(8, 2).data["image"], fresh.sample(8, 2).data["image"]
    )


if __name__ == "__main__":
    for name in ("zlib", "zstd"):
        target = GOLDEN / f"replay_{name}"
        shutil.rmtree(target, ignore_errors=True)
        build(name)[0].save(target)
        print("wrote", target, file=sys.stderr)
    target = GOLDEN / "replay_zstd_dictionary"
    shutil.rmtree(target, ignore_errors=True)
    build_dictionary().save(target)
    print("wrote", target, file=sys.stderr)
