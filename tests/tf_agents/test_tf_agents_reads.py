"""recollect.tf_agents.reads.get_next: TF-Agents style sampling of a ReplayBuffer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")

import recollect as rc
from recollect.tf_agents.reads import get_next

SPEC = {"observation": rc.ArraySpec((4,), np.float32), "action": rc.ArraySpec((), np.int64)}


def filled(num_envs: int = 4, count: int = 7) -> rc.ReplayBuffer:
    """Rows of ``count`` steps; ``action`` holds each step's id."""
    buf = rc.ReplayBuffer(SPEC, capacity=40, num_envs=num_envs, rng=0)
    for t in range(count):
        ids = rc.ids.encode(np.arange(num_envs), t).astype(np.int64)
        buf.add_batch({"observation": np.zeros((num_envs, 4), np.float32), "action": ids})
    return buf


def test_get_next_batches_windows_and_unstacks_time():
    buf = filled()
    items, info = get_next(buf, sample_batch_size=5, num_steps=3)
    assert items["observation"].shape == (5, 3, 4)
    np.testing.assert_array_equal(items["action"][:, 0], info.ids)
    one, info1 = get_next(buf)
    assert one["observation"].shape == (4,) and np.ndim(info1.ids) == 0
    unstacked, _ = get_next(buf, sample_batch_size=2, num_steps=2, time_stacked=False)
    assert isinstance(unstacked, tuple) and len(unstacked) == 2
    np.testing.assert_array_equal(unstacked[1]["action"], unstacked[0]["action"] + 1)
