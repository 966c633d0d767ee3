"""Bytes per stored step against the raw data: W2 (uniform, prioritized) and W1 (frame store).

    python benchmarks/bench_overhead.py [--quick]

Each row builds and fills one buffer in a fresh subprocess and reports, per
stored step: the raw data (the spec's bytes of one step; W1 frame store: one
84x84 frame plus the scalars, since stacks are rebuilt from frames),
``buf.nbytes`` (storage + window index + episode log + sampler arrays) and the
RSS delta of the process after the fill. Target (issue 17): within 5% of raw.
RSS counts only touched pages, so it can sit below ``nbytes``; it also holds
a few MB the allocator keeps after a fill's temporaries.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recollect as rc
from _common import rss_bytes

E = 8
W2 = {
    "observation": rc.ArraySpec((17,), np.float32),
    "action": rc.ArraySpec((6,), np.float32),
    "reward": rc.ArraySpec((), np.float32),
    "next_observation": rc.ArraySpec((17,), np.float32),
    "done": rc.ArraySpec((), bool),
}
W2_RAW = 4 * (17 + 6 + 1 + 17) + 1
W1_RAW = 84 * 84 + 8 + 4 + 1 + 1
ROWS = ("W2 uniform", "W2 prioritized (alpha 0.6, seq 1)", "W1 frame store")


def w2_block(steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "observation": rng.normal(size=(E, steps, 17)).astype(np.float32),
        "action": rng.normal(size=(E, steps, 6)).astype(np.float32),
        "reward": rng.normal(size=(E, steps)).astype(np.float32),
        "next_observation": rng.normal(size=(E, steps, 17)).astype(np.float32),
        "done": rng.random((E, steps)) < 0.001,
    }


def measure_row(name: str, capacity: int) -> dict[str, float]:
    """Builds and fills one buffer in this process; bytes per stored step."""
    if name.startswith("W2"):
        steps = w2_block(min(4096, capacity // E))
        kw = {}
        if "prioritized" in name:
            kw = {"sampler": rc.Prioritized(0.6), "sequence_length": 1}
        gc.collect()
        before = rss_bytes()
        buf = rc.ReplayBuffer(W2, capacity, E, rng=0, **kw)
        done, width = 0, steps["done"].shape[1]
        while done < capacity // E:
            n = min(width, capacity // E - done)
            buf.extend({k: v[:, :n] for k, v in steps.items()})
            done += n
        raw = W2_RAW
    else:
        from bench_memory import batches, make

        pool = batches(-1)
        gc.collect()
        before = rss_bytes()
        buf = make(-1, capacity)
        for i in range(capacity // E):
            buf.add_batch(pool[i % len(pool)])
        raw = W1_RAW
    gc.collect()
    rss = rss_bytes() - before
    return {"raw": raw, "nbytes": buf.nbytes / capacity, "rss": rss / capacity}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller buffers")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(measure_row(args.row, args.capacity)))
        return
    head = f"{'row':<36} {'capacity':>10} {'raw B':>8} {'nbytes B':>10} {'RSS B':>10}"
    print(f"## bytes per stored step (8 envs)\n{head}  {'nbytes/raw':>10} {'RSS/raw':>8}")
    for name in ROWS:
        if name.startswith("W1"):  # WORKLOADS.md W1 capacity
            capacity = 20_000 if args.quick else 100_000
        else:  # 10M: the allocator's transient blocks (a few MB) weigh < 1 B per step
            capacity = 1_000_000 if args.quick else 10_000_000
        cmd = [sys.executable, __file__, "--row", name, "--capacity", str(capacity)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        line = f"{name:<36} {capacity:>10,} {r['raw']:>8.1f} {r['nbytes']:>10.2f} {r['rss']:>10.2f}"
        print(f"{line}  {r['nbytes'] / r['raw'] - 1:>+10.1%} {r['rss'] / r['raw'] - 1:>+8.1%}")


if __name__ == "__main__":
    main()
