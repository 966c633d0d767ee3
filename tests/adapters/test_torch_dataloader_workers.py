"""recollect.torch.ReplayDataset refuses DataLoader worker processes (issue #14, item 9)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from recollect import ArraySpec, ReplayBuffer, errors  # noqa: E402
from recollect.adapters.torch import ReplayDataset  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.mark.slow  # ~12 s (DataLoader worker processes start torch): CI and --run-slow
def test_dataloader_workers_raise_saying_to_use_num_workers_0():
    # A fresh process: forking worker processes from this multithreaded one (JAX, TF,
    # prefetch threads of other tests) could deadlock.
    script = textwrap.dedent(
        """
        import numpy as np
        from torch.utils.data import DataLoader
        from recollect import ArraySpec, ReplayBuffer, errors
        from recollect.adapters.torch import ReplayDataset

        buf = ReplayBuffer({"obs": ArraySpec((2,), np.float32)}, 16, rng=0)
        for t in range(8):
            buf.add({"obs": np.full(2, t, np.float32)})
        loader = DataLoader(ReplayDataset(buf, batch_size=4), batch_size=None, num_workers=2)
        try:
            next(iter(loader))
        except errors.InvalidArgumentError as err:
            print("raised", type(err).__name__, err)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    # Each worker would sample its own copy of the buffer: identical batches, no new data.
    assert "raised InvalidArgumentError" in proc.stdout
    assert "num_workers=2" in proc.stdout and "Use DataLoader(dataset" in proc.stdout


def test_iterating_in_a_worker_raises(monkeypatch):
    buf = ReplayBuffer({"obs": ArraySpec((2,), np.float32)}, 16, rng=0)
    buf.add({"obs": np.ones(2, np.float32)})
    info = torch.utils.data._utils.worker.WorkerInfo(id=0, num_workers=3, seed=0, dataset=None)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"DataLoader worker process \(got num_workers=3\).*same batches and never see new "
        r"data\. Use DataLoader\(dataset, batch_size=None, num_workers=0\); the dataset already "
        r"prefetches on threads",
    ):
        iter(ReplayDataset(buf, batch_size=2))


def test_num_workers_0_still_works():
    buf = ReplayBuffer({"obs": ArraySpec((2,), np.float32)}, 16, rng=0)
    buf.add({"obs": np.ones(2, np.float32)})
    data, info = next(iter(DataLoader(ReplayDataset(buf, batch_size=3), batch_size=None)))
    assert data["obs"].shape == (3, 2) and info.ids.shape == (3,)
