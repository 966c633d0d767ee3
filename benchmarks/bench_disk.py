"""Compressed frames on disk (issue 41): memmap storage + zstd + frame stacks + prioritized.

Real ALE frames (``_ale_frames.py``: 5 games x 2,500 steps x 8 envs = 100k recorded
frames, cycled game after game), 8 envs, stacks of 4, zstd, ``Prioritized``,
``sequence_length=2``. Rows:

- ``add_batch`` steps/s filling the disk buffer and the same buffer in RAM (compressed);
- the prioritized learner step (``sample(32, 2)`` + ``update_priorities``), disk vs RAM,
  with the page cache warm and with the buffer's files dropped from it before every
  step (this process's pages of them unmapped, then ``posix_fadvise(DONTNEED)``: each
  step reads from the device);
- RSS (total, anonymous ``RssAnon`` and file-backed ``RssFile`` of /proc/self/status);
- disk bytes (allocated blocks of the directory) vs the in-RAM compressed bytes;
- reopen with ``recover=True`` after a child process adds unflushed steps and is
  killed with SIGKILL: wall time and the recovered step count.

    python benchmarks/bench_disk.py                 # scaled: 1M steps (capacity 1M)
    python benchmarks/bench_disk.py --steps 10000000  # the issue's 10M-step run
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import recollect as rc
from _ale_frames import GAMES, load, stacks

E = 8
RECORDED = 2500  # steps per game in the recorded pool


def spec() -> dict:
    return {
        "observation": rc.ArraySpec((84, 84, 4), np.uint8),
        "action": rc.ArraySpec((), np.int64),
        "reward": rc.ArraySpec((), np.float32),
        "is_first": rc.ArraySpec((), bool),
        "is_last": rc.ArraySpec((), bool),
    }


class Pool:
    """The recorded games cycled: ``batch(t)`` is the add_batch input of global step ``t``."""

    def __init__(self) -> None:
        self.games = [load(g, RECORDED) for g in GAMES]
        self.rng = np.random.default_rng(0)

    def batch(self, t: int) -> dict:
        data = self.games[(t // RECORDED) % len(self.games)]
        i = t % RECORDED
        part = {k: v[max(0, i - 3) : i + 1] for k, v in data.items()}
        first = part["is_first"].copy()
        first[0] |= True  # a game switch starts an episode: reset padding is exact
        obs = stacks({"frames": part["frames"], "is_first": first})[-1]
        return {
            "observation": np.ascontiguousarray(np.moveaxis(obs, 1, -1)),
            "action": self.rng.integers(0, 6, E),
            "reward": np.zeros(E, np.float32),
            "is_first": data["is_first"][i] | (i == 0),
            "is_last": data["is_last"][i],
        }


#: add_batch calls between progress lines (stderr) while filling
PROGRESS = 125_000
#: zstd level of the stored frames (``--level``)
LEVEL = 1


def make(capacity: int, directory: Path | None, **kw) -> rc.ReplayBuffer:
    storage = {"storage": "memmap", "directory": directory} if directory else {}
    return rc.ReplayBuffer(
        spec(), capacity, E, rng=0, sampler=rc.Prioritized(), sequence_length=2,
        frame_stacks={"observation": rc.FrameStack(4)},
        compression={"observation": {"name": "zstd", "level": LEVEL}}, **storage, **kw,
    )  # fmt: skip


def status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile of this process in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) * 1024
    return out


def fill(
    buf: rc.ReplayBuffer, pool: Pool, steps: int, start: int = 0, seconds: float = np.inf
) -> tuple[np.ndarray, dict]:
    """Adds ``steps // E`` batches (fewer if ``seconds`` of wall time pass first); returns
    (seconds of each add_batch ``[2, calls]``: wall time and this thread's CPU time, peak
    VmRSS and peak RssAnon, sampled every 4096 calls)."""
    spent = np.empty((2, steps // E))
    peak = {"VmRSS": 0, "RssAnon": 0}
    until = time.perf_counter() + seconds
    for t in range(start, start + steps // E):
        if t % 4096 == 0 and time.perf_counter() > until:
            spent = spent[:, : t - start]
            break
        b = pool.batch(t)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        buf.add_batch(b)
        spent[0, t - start] = time.perf_counter() - t0
        spent[1, t - start] = time.thread_time() - c0
        if t % 4096 == 0:
            now = status()
            peak = {k: max(v, now[k]) for k, v in peak.items()}
        if (t - start + 1) % PROGRESS == 0:
            done = spent[:, : t - start + 1].sum(1)
            print(f"  {(t - start + 1) * E:,} steps: {(t - start + 1) * E / done[0]:,.0f} steps/s "
                  f"wall, {(t - start + 1) * E / done[1]:,.0f} CPU; VmRSS {now['VmRSS'] >> 20} "
                  f"MiB, RssAnon {now['RssAnon'] >> 20} MiB; load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr, flush=True)  # fmt: skip
    now = status()
    return spent, {k: max(v, now[k]) for k, v in peak.items()}


def add_rates(spent: np.ndarray) -> list[tuple[str, str]]:
    """Rows of add_batch steps/s over all calls (wall time, and CPU time: on a shared
    machine the wall total includes time the process was descheduled) and the per-call
    distribution: p50 / p99 / max and the three slowest calls."""
    rows = []
    for name, x in (("wall", spent[0]), ("CPU", spent[1])):
        p50, p99 = np.quantile(x, [0.5, 0.99]) * 1e6
        rows.append((
            f"add_batch steps/s over all calls, {name} time",
            f"{E * len(x) / x.sum():,.0f} (p50 call {p50:,.0f} us = {E / p50 * 1e6:,.0f}/s; "
            f"p99 {p99:,.0f} us; max {x.max() * 1e6:,.0f} us; calls > 1 ms: "
            f"{np.count_nonzero(x > 1e-3):,} of {len(x):,}, {x[x > 1e-3].sum() / x.sum():.0%} "
            "of the time)",
        ))  # fmt: skip
    for name, x in (("wall", spent[0]), ("CPU", spent[1])):
        slow = np.argsort(x)[::-1][:4]
        rows.append((
            f"slowest add_batch calls by {name} time: call (wall / CPU ms)",
            ", ".join(f"#{i} ({spent[0, i] * 1e3:,.1f} / {spent[1, i] * 1e3:,.1f})" for i in slow),
        ))  # fmt: skip
    return rows


def per_game(buf: rc.ReplayBuffer, capacity: int) -> str:
    """Mean compressed bytes of a stored frame, by game (slot ``t`` holds step ``t``)."""
    lengths = compressed_store(buf).lengths.astype(np.int64)
    steps = min(capacity, lengths.shape[1])
    game = (np.arange(steps) // RECORDED) % len(GAMES)
    total = np.bincount(game, lengths[:, :steps].sum(0), minlength=len(GAMES))
    count = np.bincount(game, (lengths[:, :steps] > 0).sum(0), minlength=len(GAMES))
    means = total / np.maximum(count, 1)
    return ", ".join(f"{g} {m:,.0f}" for g, m in zip(GAMES, means, strict=True))


def learner_step(buf: rc.ReplayBuffer, rng: np.random.Generator):
    def step() -> None:
        s = buf.sample(32, 2)
        buf.update_priorities(s.ids, rng.random(len(s.ids)) + 0.1)

    return step


def _unmap_pages(directory: Path) -> None:
    """``madvise(MADV_DONTNEED)`` over this process's mappings of ``directory``'s files.

    ``posix_fadvise(DONTNEED)`` leaves a page in the cache while any process maps it,
    and the buffer reads its files through memory maps: without this, the "dropped"
    row dropped only pages the process had not touched since its last drop. Unmapping
    the pages from the page tables loses nothing (the file keeps them); the next read
    faults them in again, from the cache or from the device.
    """
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    root = str(directory.resolve())
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip().startswith(root + "/"):
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                madvise(lo, hi - lo, mmap.MADV_DONTNEED)


def drop_cache(directory: Path) -> None:
    """Every file of ``directory`` out of the page cache: this process's mappings of them
    unmapped (:func:`_unmap_pages`), then ``posix_fadvise(DONTNEED)`` (clean pages leave
    the cache; check with ``fincore``)."""
    if sys.platform.startswith("linux"):
        _unmap_pages(directory)
    for path in directory.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_steps(step, calls: int, before=None) -> float:
    """Median seconds of ``calls`` steps (``before()`` untimed before each)."""
    times = []
    for _ in range(calls):
        if before is not None:
            before()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def disk_bytes(directory: Path) -> int:
    """Allocated bytes of the directory's files (st_blocks)."""
    return sum(p.stat().st_blocks * 512 for p in directory.iterdir() if p.is_file())


def child(directory: str, capacity: int, batches: int, start: int) -> None:
    """Reopens the directory, adds ``batches`` unflushed batches, then SIGKILLs itself."""
    buf = make(capacity, Path(directory))
    pool = Pool()
    for t in range(start, start + batches):
        buf.add_batch(pool.batch(t))
    os.kill(os.getpid(), signal.SIGKILL)


def compressed_store(buf: rc.ReplayBuffer):
    (ring,) = buf.storage.compressed_rings().values()
    return ring.slots


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1_000_000, help="steps added = capacity")
    p.add_argument("--calls", type=int, default=300, help="learner steps timed per row")
    p.add_argument("--dir", default=None, help="where the buffer directory goes (default: tmp)")
    p.add_argument("--level", type=int, default=1, help="zstd level of the frames (default 1)")
    p.add_argument("--no-ram", action="store_true", help="skip the same buffer in RAM")
    p.add_argument(
        "--fill-seconds",
        type=float,
        default=np.inf,
        help="stop filling the disk buffer after this many seconds (wall)",
    )
    p.add_argument("--save-calls", default=None, help="save the disk add_batch times (.npy)")
    p.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    global LEVEL
    LEVEL = a.level
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]), int(a.child[3]))
        return
    capacity = a.steps
    root = Path(tempfile.mkdtemp(dir=a.dir, prefix="bench_disk_"))
    directory = root / "buf"
    pool = Pool()
    rng = np.random.default_rng(1)
    rows: list[tuple[str, str]] = []
    print(f"scale: {capacity:,} steps (capacity {capacity:,}, 8 envs, stacks of 4, zstd level "
          f"{LEVEL}, Prioritized, sequence_length 2)")  # fmt: skip
    print(f"frames: {len(GAMES)} games x {RECORDED} steps x {E} envs, cycled; RSS rows are "
          "deltas over the process before the buffer (which holds the recorded pool)")  # fmt: skip
    print(f"load average at start: {os.getloadavg()}")
    try:
        rss0 = status()
        disk = make(capacity, directory)
        add_s, peak = fill(disk, pool, capacity, seconds=a.fill_seconds)
        added = add_s.shape[1] * E
        if added < capacity:
            print(f"filled {added:,} of {capacity:,} steps in --fill-seconds {a.fill_seconds:,.0f}")
        if a.save_calls:
            np.save(a.save_calls, add_s)
        disk.flush()
        warm = time_steps(learner_step(disk, rng), a.calls)
        after = status()
        cold = time_steps(
            learner_step(disk, rng), max(30, a.calls // 5), lambda: drop_cache(directory)
        )
        store = compressed_store(disk)
        d_bytes, live = disk_bytes(directory), store.stored_bytes
        blocks = store.arena.disk_bytes
        rows = [(f"disk: {k}", v) for k, v in add_rates(add_s)] + [
            ("disk: compressed bytes per frame by game", per_game(disk, capacity)),
            ("disk: learner step, cache warm (us)", f"{warm * 1e6:,.0f}"),
            ("disk: learner step, cache dropped (us)", f"{cold * 1e6:,.0f}"),
            ("disk: peak VmRSS / RssAnon adding, delta (MiB)",
             f"{(peak['VmRSS'] - rss0['VmRSS']) / 2**20:,.0f} / "
             f"{(peak['RssAnon'] - rss0['RssAnon']) / 2**20:,.0f}"),
            ("disk: VmRSS / RssAnon / RssFile after sampling, delta (MiB)",
             " / ".join(f"{(after[k] - rss0[k]) / 2**20:,.0f}"
                        for k in ("VmRSS", "RssAnon", "RssFile"))),
            ("disk: directory bytes (allocated) (MiB)", f"{d_bytes / 2**20:,.1f}"),
            ("disk: block file / live compressed bytes",
             f"{blocks / 2**20:,.1f} / {live / 2**20:,.1f} MiB = {blocks / live:.2f}x"),
            ("disk: bytes per stored step", f"{d_bytes / added:,.0f}"),
        ]  # fmt: skip
        disk.close()
        del disk, store
        gc.collect()
        # kill -9 after unflushed adds, then recover
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, __file__, "--level", str(LEVEL), "--child", str(directory),
             str(capacity), "200", str(added // E)],
            check=False,
        )  # fmt: skip
        child_s = time.perf_counter() - t0
        drop_cache(directory)
        t0 = time.perf_counter()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            back = make(capacity, directory, recover=True)
        reopen_s = time.perf_counter() - t0
        kept, dropped = back.num_frames(), back.persistence.recovered_steps_dropped
        rows.append(("reopen after kill -9, recover=True (s)",
                     f"{reopen_s:.2f}: {kept:,} steps kept, {dropped:,} dropped "
                     f"(child ran {child_s:.1f} s)"))  # fmt: skip
        back.close()
        del back
        gc.collect()
        shutil.rmtree(directory)
        if a.no_ram:
            return
        # the same buffer in RAM (compressed)
        rss1 = status()
        ram = make(capacity, None)
        ram_add_s, _ = fill(ram, pool, capacity)
        ram_warm = time_steps(learner_step(ram, rng), a.calls)
        ram_store = compressed_store(ram)
        ram_status = status()
        rows += [
            *((f"RAM: {k}", v) for k, v in add_rates(ram_add_s)),
            ("RAM: learner step (us)", f"{ram_warm * 1e6:,.0f}"),
            ("RAM: arena bytes / live compressed bytes (MiB)",
             f"{ram_store.arena.nbytes / 2**20:,.1f} / {ram_store.stored_bytes / 2**20:,.1f}"),
            ("RAM: VmRSS / RssAnon, delta (MiB)",
             f"{(ram_status['VmRSS'] - rss1['VmRSS']) / 2**20:,.0f} / "
             f"{(ram_status['RssAnon'] - rss1['RssAnon']) / 2**20:,.0f}"),
            ("disk vs RAM learner step (warm / dropped)",
             f"{ram_warm / warm:.2f}x / {ram_warm / cold:.2f}x of RAM speed"),
            ("disk bytes vs in-RAM compressed bytes",
             f"{d_bytes / ram_store.arena.nbytes:.2f}x of the arena, "
             f"{d_bytes / ram_store.stored_bytes:.2f}x of the live values"),
        ]  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
        rows.append(("load average at the end (1, 5, 15 min)", f"{os.getloadavg()}"))
        width = max(len(r[0]) for r in rows) if rows else 0
        for name, value in rows:
            print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
