"""recollect.torch.ReplayDataset refuses DataLoader worker processes (issue #14, item 9)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from recollect import ArraySpec, ReplayBuffer, errors  # noqa: E402
from recollect.torch import ReplayDataset  # noqa: E402


def test_dataloader_workers_raise_saying_to_use_num_workers_0():
    buf = ReplayBuffer({"obs": ArraySpec((2,), np.float32)}, 16, rng=0)
    for t in range(8):
        buf.add({"obs": np.full(2, t, np.float32)})
    loader = DataLoader(ReplayDataset(buf, batch_size=4), batch_size=None, num_workers=2)
    # Each worker would sample its own copy of the buffer: identical batches, no new data.
    with pytest.raises(errors.InvalidArgumentError, match=r"num_workers=0.*prefetches"):
        next(iter(loader))


def test_num_workers_0_still_works():
    buf = ReplayBuffer({"obs": ArraySpec((2,), np.float32)}, 16, rng=0)
    buf.add({"obs": np.ones(2, np.float32)})
    data, info = next(iter(DataLoader(ReplayDataset(buf, batch_size=3), batch_size=None)))
    assert data["obs"].shape == (3, 2) and info.ids.shape == (3,)
