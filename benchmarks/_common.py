"""Timing and table helpers shared by the benchmark scripts (plain numpy, no deps).

Rows of one table are timed interleaved (one repeat of every row, then the
next repeat), so load from other processes hits all rows alike; each row's
figure is the median over repeats, after a warm-up of ``WARMUP_CALLS`` calls
and ``WARMUP_REPEATS`` repeats' time (at most ``WARMUP_MAX_S``): a row's
first calls allocate its buffers, and code that measures its own choices
(a split over threads) settles before it is timed.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

__all__ = ["Row", "cycle", "measure", "median_seconds", "parse_args", "print_table", "rss_bytes"]

T = TypeVar("T")


@dataclass
class Row:
    """One benchmark row: ``fn()`` moves ``items`` transitions per call."""

    name: str
    fn: Callable[[], object]
    items: int
    seconds: float = float("nan")

    @property
    def rate(self) -> float:
        """Transitions per second."""
        return self.items / self.seconds


def cycle(items: Sequence[T]) -> Callable[[], T]:
    """Returns a cheap ``next()`` that yields ``items`` round-robin forever."""
    return itertools.cycle(items).__next__


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per row (>= 5)")
    parser.add_argument("--no-peers", action="store_true", help="skip cpprb/SB3/torchrl rows")
    parser.add_argument("--only", default="", help="comma list of workloads, e.g. w1,w2")
    args = parser.parse_args()
    if args.repeats is None:
        args.repeats = 5 if args.quick else 9
    args.repeat_s = 0.02 if args.quick else 0.06
    return args


def _calls_for(fn: Callable[[], object], target_s: float) -> int:
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    return max(1, min(100_000, int(target_s / max(once, 1e-7))))


#: A row's warm-up: at least this many calls and repeats' time, at most WARMUP_MAX_S.
WARMUP_CALLS, WARMUP_REPEATS, WARMUP_MAX_S = 20, 3, 1.0


def _warm_up(fn: Callable[[], object], repeat_s: float) -> None:
    t0 = time.perf_counter()
    fn()
    calls, least = 1, WARMUP_REPEATS * repeat_s
    while calls < WARMUP_CALLS or time.perf_counter() - t0 < least:
        if time.perf_counter() - t0 > WARMUP_MAX_S:
            return
        fn()
        calls += 1


def measure(rows: list[Row], repeats: int, repeat_s: float) -> list[Row]:
    """Sets ``row.seconds`` (median seconds per call) for every row, timed interleaved."""
    for row in rows:
        _warm_up(row.fn, repeat_s)
    calls = [_calls_for(row.fn, repeat_s) for row in rows]
    times: list[list[float]] = [[] for _ in rows]
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for k, row in enumerate(rows):
                fn, n = row.fn, calls[k]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[k].append((time.perf_counter() - t0) / n)
    finally:
        if gc_was:
            gc.enable()
    for row, ts in zip(rows, times, strict=True):
        row.seconds = float(np.median(ts))
    return rows


def median_seconds(rows: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of one call of each row (rows interleaved per repeat, after a warm-up)."""
    for fn in rows.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(ts)) for name, ts in times.items()}


def print_table(title: str, rows: list[Row], limits: list[str]) -> None:
    """Prints transitions/s and the ratio of every row to each named limit row."""
    by_name = {r.name: r for r in rows}
    head = f"{'row':<44} {'transitions/s':>14} {'us/call':>10}"
    head += "".join(f" {'x ' + name:>14}" for name in limits)
    print(f"\n## {title}\n{head}\n{'-' * len(head)}")
    for r in rows:
        line = f"{r.name:<44} {r.rate:>14,.0f} {r.seconds * 1e6:>10.1f}"
        line += "".join(f" {r.rate / by_name[name].rate:>14.2f}" for name in limits)
        print(line, flush=True)


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
