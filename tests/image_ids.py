"""An image buffer whose pixels encode each step's id, to check held batches keep their values.

Large gathers recycle output memory (``recollect.storage.gather``); every
adapter test holds a dozen batches and checks none was overwritten.
"""

from __future__ import annotations

import numpy as np

import recollect as rc
from recollect import ArraySpec, ReplayBuffer

NUM_ENVS = 4


def image_buffer_with_id_pixels(steps: int = 100) -> ReplayBuffer:
    """``[84, 84, 4]`` uint8 steps whose every pixel is ``id % 251``."""
    buf = ReplayBuffer({"obs": ArraySpec((84, 84, 4), np.uint8)}, 400, num_envs=NUM_ENVS, rng=0)
    for t in range(steps):
        ids = rc.ids.encode(np.arange(NUM_ENVS), t)
        pixels = (ids % 251).astype(np.uint8)[:, None, None, None]
        buf.add_batch({"obs": np.broadcast_to(pixels, (NUM_ENVS, 84, 84, 4))})
    return buf


def assert_window_pixels_match_ids(obs: np.ndarray, ids: np.ndarray) -> None:
    """``obs`` ``[B, 2, 84, 84, 4]`` holds the pixels of windows starting at ``ids``."""
    expected = (np.asarray(ids)[:, None] + np.arange(2)) % 251
    np.testing.assert_array_equal(obs, np.broadcast_to(expected[:, :, None, None, None], obs.shape))
