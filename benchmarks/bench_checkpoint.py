"""Checkpoint save/load time, size on disk and peak RSS for W2 (WORKLOADS.md) at 1M steps.

``python benchmarks/bench_checkpoint.py [--quick] [--steps N] [--dir DIR]``

Rows are timed interleaved (one repeat of every row, then the next), median
of the repeats after a warm-up. Limit rows, same data, same run: ``np.save``
of each leaf array (no checksum; with and without fsync), ``np.load`` of the
same files, and a memcpy of the same bytes. Loads read from the page cache
(the files were just written), so they measure CPU cost, not the disk.

The buffer is filled by writing its storage arrays directly (random data),
which is what a full 1M-step buffer looks like; add throughput is
``bench_core.py``'s business. Peak RSS is measured in a fresh subprocess per
mode: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after the load (and one
sample) against the current RSS (``VmRSS``) after imports, before the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import recollect as rc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_seconds

NUM_ENVS = 8


def w2_spec() -> dict:
    return {
        "observation": rc.ArraySpec((17,), np.float32),
        "action": rc.ArraySpec((6,), np.float32),
        "reward": rc.ArraySpec((), np.float32),
        "next_observation": rc.ArraySpec((17,), np.float32),
        "done": rc.ArraySpec((), np.bool_),
    }


def w2_buffer(steps: int, capacity: int) -> rc.ReplayBuffer:
    buf = rc.ReplayBuffer(w2_spec(), capacity, NUM_ENVS, rng=0)
    rng = np.random.default_rng(0)
    per_row = steps // NUM_ENVS
    for array in buf.storage.arrays:
        view = array[:, :per_row]
        if array.dtype == np.bool_:
            view[...] = rng.random(view.shape) < 0.01
        else:
            view[...] = rng.standard_normal(view.shape, dtype=np.float32)
    state = buf.table.state_dict()
    state["index"]["t"][:] = per_row
    buf.table.load_state_dict(state)
    return buf


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def np_save(arrays: list[np.ndarray], root: Path, fsync: bool) -> None:
    root.mkdir(exist_ok=True)
    for i, array in enumerate(arrays):
        with open(root / f"{i}.npy", "wb") as f:
            np.save(f, array, allow_pickle=False)
            if fsync:
                f.flush()
                os.fsync(f.fileno())


def np_load(root: Path, n: int) -> list[np.ndarray]:
    return [np.load(root / f"{i}.npy", allow_pickle=False) for i in range(n)]


_RSS_CHILD = """
import resource, sys
import numpy as np
import recollect as rc
mode, path = sys.argv[1], sys.argv[2]
def kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))
before = kib("VmRSS:")
if mode == "np.load":
    import pathlib
    arrays = [np.load(p, allow_pickle=False) for p in sorted(pathlib.Path(path).glob("*.npy"))]
else:
    buf = rc.ReplayBuffer.load(path, mmap=(mode == "mmap"))
after = [kib("VmHWM:"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, kib("RssAnon:"),
         kib("RssFile:")]
if mode != "np.load":
    for _ in range(1000):
        buf.sample(256)
print(before, *after, kib("RssAnon:"), kib("RssFile:"))
"""


def rss(mode: str, path: Path) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD, mode, str(path)],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return [int(x) / 1024 for x in out]  # MiB


def print_rss(ck: Path, raw: Path, nbytes: int) -> None:
    print("\nmemory during load, fresh process per mode (MiB; /proc/self/status)")
    print("before: VmRSS after imports. peak: VmHWM after the load (ru_maxrss beside it; it")
    print("inherits the forking parent's peak, so read VmHWM). anon/file: RssAnon/RssFile after")
    print("the load, then after 1000 x sample(256). Mapped file pages are page cache, shared and")
    print("reclaimable; anon pages are the process's own copy of the data.")
    head = ["mode", "before", "peak", "ru_maxrss", "peak-before", "/data", "anon", "file",
            "anon@1k", "file@1k"]  # fmt: skip
    print(" ".join(f"{h:>11s}" for h in head))
    for mode in ("read", "mmap", "np.load"):
        before, hwm, maxrss, anon, file, anon2, file2 = rss(mode, raw if mode == "np.load" else ck)
        delta = hwm - before
        cells = [before, hwm, maxrss / 1024 * 1024, delta, delta * 2**20 / nbytes, anon, file]
        cells += [anon2, file2] if mode != "np.load" else [float("nan")] * 2
        print(
            f"{mode:>11s} "
            + " ".join(f"{c:11.1f}" if i != 4 else f"{c:11.3f}" for i, c in enumerate(cells))
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k steps, 3 repeats")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    steps = args.steps or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 5)
    work = Path(tempfile.mkdtemp(prefix="bench_ckpt_", dir=args.dir))
    try:
        nbytes = run(steps, repeats, work)  # returns after freeing its buffers
        print_rss(work / "ck", work / "raw", nbytes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(steps: int, repeats: int, work: Path) -> int:
    buf = w2_buffer(steps, steps)
    arrays = buf.storage.arrays
    nbytes = sum(a.nbytes for a in arrays)
    ck, raw = work / "ck", work / "raw"
    dest = [np.empty_like(a) for a in arrays]
    rows = {
        "recollect save (crc32, fsync, atomic)": lambda: buf.save(ck),
        "limit: np.save per leaf + fsync": lambda: np_save(arrays, raw, True),
        "limit: np.save per leaf (no fsync)": lambda: np_save(arrays, raw, False),
        "recollect load (read into RAM)": lambda: rc.ReplayBuffer.load(ck),
        "recollect load (mmap=True)": lambda: rc.ReplayBuffer.load(ck, mmap=True),
        "limit: np.load per leaf": lambda: np_load(raw, len(arrays)),
        "copy: memcpy of the bytes": lambda: [
            np.copyto(d, a) for d, a in zip(dest, arrays, strict=True)
        ],
    }
    times = median_seconds(rows, repeats)
    print(
        f"\nW2 checkpoint, {steps:,} steps ({NUM_ENVS} env rows), data {nbytes / 2**20:.1f} MiB,"
        f" median of {repeats}"
    )
    print(
        f"{'row':42s} {'seconds':>9s} {'MiB/s':>9s} {'x limit np.save/np.load':>24s} {'x copy':>8s}"
    )
    copy_s = times["copy: memcpy of the bytes"]
    for name, s in times.items():
        limit = (
            times["limit: np.save per leaf + fsync"]
            if "save" in name
            else times["limit: np.load per leaf"]
        )
        ratio = "" if name.startswith("copy") else f"{limit / s:.2f}"
        print(f"{name:42s} {s:9.3f} {nbytes / 2**20 / s:9.0f} {ratio:>24s} {copy_s / s:8.3f}")
    size = du(ck)
    print(
        f"\non disk: checkpoint {size / 2**20:.1f} MiB = {size / nbytes:.4f} x data bytes "
        f"(np.save files: {du(raw) / 2**20:.1f} MiB)"
    )
    half = w2_buffer(steps // 2, steps)
    half.save(work / "half")
    print(
        f"half-full buffer (capacity {steps:,}, {steps // 2:,} stored): "
        f"{du(work / 'half') / 2**20:.1f} MiB on disk"
    )
    return nbytes


if __name__ == "__main__":
    main()
