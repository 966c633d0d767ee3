"""W1 (Atari) with the frame store and on memmap: bytes per step, add and sample throughput.

    python benchmarks/bench_memory.py [--quick]

Tables (WORKLOADS.md W1, 8 envs in ONE buffer, batches of 8):

1. memory: RSS delta after filling ``capacity`` steps, per stored step
   (target <= 7,400 B; one 84x84 frame is 7,056 B), beside the naive size.
2. add_batch (steady state, ring already full) vs the memcpy row: np.copyto
   of the bytes one add_batch receives into a rotating 64 MiB destination.
3. uniform sample of 32/256 transitions (``sample(B, num_steps=2)``: the
   observation and next_observation stacks, action, reward, flags) vs the
   gather row (naive stacked arrays, ``store[idx]`` per field) and the memcpy
   row (np.copyto of the same output bytes). Stack layouts: ``[84, 84, 4]``
   (stack axis last, W1) and gymnasium's ``[4, 84, 84]`` (axis 0).
4. memmap (frame store on disk): sample with the page cache warm, and cold
   (buffer closed, its files dropped from the page cache with
   ``posix_fadvise(DONTNEED)``, directory reopened; first calls timed).
5. compressed frame store (``compression={"observation": "zstd"}``) on real
   ALE frames (``_ale_frames.py``: AtariPreprocessing + FrameStackObservation(4),
   8 envs, random policy; Pong, Breakout, MsPacman, SpaceInvaders, Seaquest):
   RSS delta per stored step, add_batch and sample(32/256, 2) beside the
   uncompressed frame store and the memcpy rows of the same run. A capacity
   larger than the recording cycles it (each frame is compressed on its own,
   so repeating frames changes no frame's size).

Own options: ``--only frames`` (tables 1-4) or ``--only compressed`` (table 5);
``--games Pong,MsPacman``; ``--codecs zstd,lz4``; ``--record-steps N`` (per env, default 2500);
``--steps N``: only the N-step Pong buffer's RSS (``--steps 1000000``).
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _compressed_rows
import recollect as rc
from _common import Row, cycle, measure, parse_args, print_table, rss_bytes

E = 8
FRAME = 84 * 84
NAIVE_ROWS = 25_000  # naive stacked store for the gather row (out of cache already)


def w1_spec(axis: int) -> dict:
    shape = (84, 84, 4) if axis == -1 else (4, 84, 84)
    return {
        "observation": rc.ArraySpec(shape, np.uint8),
        "action": rc.ArraySpec((), np.int64),
        "reward": rc.ArraySpec((), np.float32),
        "is_last": rc.ArraySpec((), bool),
        "is_terminal": rc.ArraySpec((), bool),
    }


def batches(axis: int, count: int = 8) -> list[dict]:
    rng = np.random.default_rng(0)
    shape = (E, 84, 84, 4) if axis == -1 else (E, 4, 84, 84)
    return [
        {
            "observation": rng.integers(0, 255, shape, dtype=np.uint8),
            "action": rng.integers(0, 6, E),
            "reward": rng.normal(size=E).astype(np.float32),
            "is_last": rng.random(E) < 0.001,
            "is_terminal": np.zeros(E, bool),
        }
        for _ in range(count)
    ]


def make(axis: int, capacity: int, contiguous: bool = False, **kw) -> rc.ReplayBuffer:
    stacks = {"observation": rc.FrameStack(4, axis=axis, contiguous=contiguous)}
    return rc.ReplayBuffer(w1_spec(axis), capacity, E, rng=0, frame_stacks=stacks, **kw)


def fill(buf: rc.ReplayBuffer, pool: list[dict], steps: int) -> float:
    t0 = time.perf_counter()
    for i in range(steps // E):
        buf.add_batch(pool[i % len(pool)])
    return time.perf_counter() - t0


def memory_table(capacity: int, pool: list[dict]) -> rc.ReplayBuffer:
    gc.collect()
    before = rss_bytes()
    buf = make(-1, capacity)
    fill_s = fill(buf, pool, capacity)
    delta = rss_bytes() - before
    naive = capacity * (2 * 4 * FRAME + 8 + 4 + 1 + 1)
    print("\n## W1 memory (frame store, 8 envs in one buffer)")
    print(f"{'capacity (steps)':<44} {capacity:>14,}")
    print(f"{'RSS delta / stored step (B)':<44} {delta / capacity:>14,.0f}  target <= 7,400")
    print(f"{'buf.nbytes / step (B)':<44} {buf.nbytes / capacity:>14,.0f}")
    print(f"{'estimate_memory / step (B)':<44} {_estimate(capacity) / capacity:>14,.0f}")
    print(f"{'naive obs+next_obs stacks / step (B)':<44} {naive / capacity:>14,.0f}")
    print(f"{'saving vs naive':<44} {naive / max(delta, 1):>13.1f}x")
    print(f"{'first fill incl. page faults (trans/s)':<44} {capacity / fill_s:>14,.0f}")
    return buf


def _estimate(capacity: int) -> int:
    stacks = {"observation": rc.FrameStack(4)}
    return rc.estimate_memory(w1_spec(-1), capacity, E, frame_stacks=stacks)


def add_table(buf: rc.ReplayBuffer, pool: list[dict], args) -> None:
    nbytes = sum(v.nbytes for v in pool[0].values())
    slots = max(2, (64 << 20) // nbytes)
    dest = np.empty((slots, nbytes), np.uint8)
    srcs = [np.concatenate([v.reshape(-1).view(np.uint8) for v in b.values()]) for b in pool]
    state = {"i": 0}

    def memcpy():
        i = state["i"] = state["i"] + 1
        np.copyto(dest[i % slots], srcs[i % len(srcs)])

    nxt = cycle(pool)
    rows = [
        Row("memcpy (batch bytes, rotating 64 MiB)", memcpy, E),
        Row("recollect add_batch, frame store", lambda: buf.add_batch(nxt()), E),
    ]
    print_table(
        "W1 add_batch (8 envs, ring full)",
        measure(rows, args.repeats, args.repeat_s),
        ["memcpy (batch bytes, rotating 64 MiB)"],
    )


def sample_rows(label: str, buf: rc.ReplayBuffer, batch: int) -> Row:
    return Row(f"{label} sample({batch}, 2)", lambda: buf.sample(batch, 2), batch)


def limit_rows(batch: int) -> list[Row]:
    rng = np.random.default_rng(1)
    obs = np.zeros((NAIVE_ROWS, 84, 84, 4), np.uint8)
    nxt = np.zeros_like(obs)
    obs[:] = 1  # touch every page
    nxt[:] = 2
    small = [np.zeros(NAIVE_ROWS, d) for d in (np.int64, np.float32, bool, bool)]

    def gather():
        idx = rng.integers(0, NAIVE_ROWS, batch)
        return [obs[idx], nxt[idx]] + [a[idx] for a in small]

    out_bytes = batch * (2 * 4 * FRAME + 2 * (8 + 4 + 1 + 1))
    src, dst = np.ones(out_bytes, np.uint8), np.empty(out_bytes, np.uint8)
    return [
        Row(f"memcpy ({out_bytes // 1024} KiB)", lambda: np.copyto(dst, src), batch),
        Row("gather (naive stacks, store[idx])", gather, batch),
    ]


def sample_tables(buf_last, buf_first, buf_contiguous, args) -> None:
    for batch in (32, 256):
        limits = limit_rows(batch)
        rows = [
            *limits,
            sample_rows("frame store [84,84,4] (strided view)", buf_last, batch),
            sample_rows("frame store [84,84,4] contiguous=True", buf_contiguous, batch),
            sample_rows("frame store [4,84,84]", buf_first, batch),
        ]
        names = [r.name for r in limits]
        print_table(
            f"W1 uniform sample, batch {batch}", measure(rows, args.repeats, args.repeat_s), names
        )
        del limits, rows
        gc.collect()


def drop_cache(directory: Path) -> str:
    for path in directory.glob("*.npy"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "posix_fadvise(DONTNEED) + drop_caches"
    except OSError:
        return "posix_fadvise(DONTNEED)"


def _noop() -> None:
    return None


def cold_rows(d: Path, capacity: int, repeats: int) -> tuple[list[Row], str]:
    """Closes nothing itself: reopens ``d`` after dropping its pages; times the first calls."""
    rows, how = [], ""
    for batch in (32, 256):
        times = []
        for _ in range(repeats):
            how = drop_cache(d)
            again = make(-1, capacity, storage="memmap", directory=d)
            t0 = time.perf_counter()
            for _ in range(10):
                again.sample(batch, 2)
            times.append((time.perf_counter() - t0) / 10)
            again.flush()
            del again
            gc.collect()
        row = Row(f"memmap cold sample({batch}, 2), first 10 calls", _noop, batch)
        row.seconds = float(np.median(times))
        rows.append(row)
    return rows, how


def memmap_table(capacity: int, pool: list[dict], args) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("RECOLLECT_BENCH_DIR")) as tmp:
        d = Path(tmp) / "w1"
        buf = make(-1, capacity, storage="memmap", directory=d)
        first = Row("memmap add_batch (first fill)", _noop, capacity)
        first.seconds = fill(buf, pool, capacity)
        nxt = cycle(pool)
        warm = [
            Row("memmap add_batch (warm)", lambda add=buf.add_batch: add(nxt()), E),
            sample_rows("memmap warm", buf, 32),
            sample_rows("memmap warm", buf, 256),
        ]
        measure(warm, args.repeats, args.repeat_s)
        warm = [Row(r.name, _noop, r.items, r.seconds) for r in warm]  # drop the closures
        buf.flush()
        del buf
        gc.collect()  # unmaps the files, so their pages can leave the page cache
        cold, how = cold_rows(d, capacity, 3)
        size = _estimate(capacity) / 2**20
        print(f"\n## W1 on memmap (frame store, {size:,.0f} MiB of files; cold: {how}, reopened)")
        print(f"{first.name:<44} {first.rate:>14,.0f} transitions/s (whole fill)")
        for r in [*warm, *cold]:
            print(f"{r.name:<44} {r.rate:>14,.0f} {r.seconds * 1e6:>10.1f} us/call")


def _own_args() -> dict:
    """Removes this script's own options from sys.argv (the rest go to parse_args)."""
    own, rest, argv = {}, [], sys.argv[1:]
    names = {"--games": str, "--record-steps": int, "--steps": int, "--codecs": str}
    while argv:
        a = argv.pop(0)
        key, _, value = a.partition("=")
        if key in names:
            own[key[2:].replace("-", "_")] = names[key](value or argv.pop(0))
        else:
            rest.append(a)
    sys.argv[1:] = rest
    return own


def main() -> None:
    own = _own_args()
    args = parse_args(__doc__.splitlines()[0])
    capacity = 20_000 if args.quick else 100_000
    record = own.get("record_steps", 2500)
    if "steps" in own:
        _compressed_rows.million(own["steps"], record)
        return
    if args.only != "frames":
        games = own.get("games", ",".join(_compressed_rows.GAMES)).split(",")
        codecs = own.get("codecs", "zstd").split(",")
        _compressed_rows.run(args, capacity, record, games, codecs)
        if args.only == "compressed":
            return
    print(f"W1: 8 envs, capacity {capacity:,} steps, numpy {np.__version__}")
    pool_last, pool_first = batches(-1), batches(0)
    buf_last = memory_table(capacity, pool_last)
    add_table(buf_last, pool_last, args)
    buf_first = make(0, capacity)
    fill(buf_first, pool_first, capacity)
    buf_contiguous = make(-1, capacity, contiguous=True)
    fill(buf_contiguous, pool_last, capacity)
    sample_tables(buf_last, buf_first, buf_contiguous, args)
    del buf_last, buf_first, buf_contiguous
    gc.collect()
    memmap_table(capacity, pool_last, args)


if __name__ == "__main__":
    main()
