"""W2 sampling time against the number of stored steps (1M, 10M, 100M): does it stay flat?

    python benchmarks/bench_scale.py [--quick] [--out PATH] [--ram-100m]

For each size ``N`` (1M and 10M in RAM; 100M in memmap storage, unless
``--ram-100m``), one W2 buffer (8 envs, obs float32[17], action float32[6],
reward float32, next_obs float32[17], done bool) is filled with ``extend``
blocks, then these rows are timed interleaved in one run (median us per call
of a batch of 256):

- ``gather limit``: ``store[idx]`` for every leaf, ``idx`` uniform over all
  ``N`` stored steps, on the buffer's own arrays (RAM or memmap). Random
  gathers miss the caches more as ``N`` grows: that growth is physics.
- ``uniform``: ``sample(256)`` (single steps).
- ``windows``: ``sample(256, num_steps=2)``.
- ``prioritized``: ``sample(256)`` of a buffer with ``Prioritized(0.6)``
  (``sequence_length=1``), importance weights with beta 0.4 (its own buffer,
  with its own limit row measured beside it).
- ``... draw``: the same without the gather (``table.draw``): the sampler's
  own work (window index, or sum tree search and importance weights; the tree
  is in RAM even for memmap storage).

Prints the table (us per sample call, ratio to the 1M figure, and the row's
ratio to the limit) and draws the curve (log x) into ``--out``.

A second table times ``Table.draw`` of tables without storage (window index
and sampler only, so every size fits in RAM), all sizes interleaved in ONE
``measure`` call: the sampler's own growth, without the data's cache misses
and without the noise of separate runs.
Target (issue 17): each sampler's time grows <= 2x from 1M to 100M.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recollect as rc
from _common import Row, measure
from recollect.table import Table

E = 8
BATCH = 256
SPEC = {
    "observation": rc.ArraySpec((17,), np.float32),
    "action": rc.ArraySpec((6,), np.float32),
    "reward": rc.ArraySpec((), np.float32),
    "next_observation": rc.ArraySpec((17,), np.float32),
    "done": rc.ArraySpec((), bool),
}
SAMPLERS = ("uniform", "windows", "prioritized")


def block(steps: int) -> dict[str, np.ndarray]:
    """One ``extend`` block: every leaf ``[E, steps, *shape]`` of random data."""
    rng = np.random.default_rng(0)
    return {
        "observation": rng.normal(size=(E, steps, 17)).astype(np.float32),
        "action": rng.uniform(-1, 1, (E, steps, 6)).astype(np.float32),
        "reward": rng.normal(size=(E, steps)).astype(np.float32),
        "next_observation": rng.normal(size=(E, steps, 17)).astype(np.float32),
        "done": rng.random((E, steps)) < 0.001,
    }


def build(
    capacity: int, prioritized: bool, directory: Path | None
) -> tuple[rc.ReplayBuffer, float]:
    """A filled W2 buffer of ``capacity`` steps and its fill time in seconds."""
    kw: dict = {"storage": "memmap", "directory": directory} if directory else {}
    if prioritized:
        kw.update(sampler=rc.Prioritized(0.6, importance_sampling_exponent=0.4), sequence_length=1)
    buf = rc.ReplayBuffer(SPEC, capacity, E, rng=0, **kw)
    per_row = capacity // E
    steps = block(min(per_row, 1 << 15))
    t0 = time.perf_counter()
    done = 0
    while done < per_row:
        n = min(per_row - done, steps["done"].shape[1])
        buf.extend({k: v[:, :n] for k, v in steps.items()})
        done += n
    return buf, time.perf_counter() - t0


def limit_row(buf: rc.ReplayBuffer, name: str) -> Row:
    """``store[idx]`` per leaf over all stored steps, on the buffer's own arrays."""
    stores = [a.reshape(buf.capacity, *a.shape[2:]) for a in buf.storage.arrays]
    rng = np.random.default_rng(1)

    def gather() -> list[np.ndarray]:
        idx = rng.integers(0, buf.capacity, BATCH)
        return [s[idx] for s in stores]

    return Row(name, gather, BATCH)


def time_size(capacity: int, directory: Path | None, args) -> dict[str, float]:
    """Median seconds per call of every row at one size (two buffers, one after the other)."""
    result: dict[str, float] = {}
    where = "memmap" if directory else "RAM"
    for prioritized in (False, True):
        d = None if directory is None else directory / ("per" if prioritized else "uniform")
        buf, fill_s = build(capacity, prioritized, d)
        print(
            f"  {capacity:>12,} steps {where}, prioritized={prioritized}: filled in {fill_s:.1f} s",
            flush=True,
        )
        if prioritized:
            rows = [
                limit_row(buf, "limit (prioritized buffer)"),
                Row("prioritized", lambda b=buf: b.sample(BATCH), BATCH),
                Row("prioritized draw", lambda b=buf: b.table.draw(BATCH), BATCH),
            ]
        else:
            rows = [
                limit_row(buf, "limit"),
                Row("uniform", lambda b=buf: b.sample(BATCH), BATCH),
                Row("windows", lambda b=buf: b.sample(BATCH, 2), BATCH),
                Row("uniform draw", lambda b=buf: b.table.draw(BATCH), BATCH),
                Row("windows draw", lambda b=buf: b.table.draw(BATCH, 2), BATCH),
            ]
        for row in measure(rows, args.repeats, args.repeat_s):
            result[row.name] = row.seconds
            print(f"    {row.name:<28} {row.seconds * 1e6:>10.1f} us", flush=True)
        del rows, buf
        gc.collect()
        if d is not None:
            shutil.rmtree(d)
    return result


def draw_table(sizes: list[int], args) -> None:
    """``Table.draw(256)`` per sampler on storage-less tables of every size, interleaved."""
    rows = []
    for n in sizes:
        for kind in SAMPLERS:
            per = kind == "prioritized"
            sampler = rc.Prioritized(0.6, importance_sampling_exponent=0.4) if per else None
            length = n // E
            table = Table(E, length, sampler=sampler, sequence_length=1 if per else None, rng=0)
            for done in range(0, length, 1 << 16):
                count = min(1 << 16, length - done)
                slots = (table.index.t[:, None] + np.arange(count)) % length
                table.insert_block(None, slots, count, None)
            steps = 2 if kind == "windows" else None
            rows.append(Row(f"{kind} {n:.0e}", lambda t=table, k=steps: t.draw(BATCH, k), BATCH))
    measure(rows, args.repeats, args.repeat_s)
    print(f"\n## Table.draw({BATCH}) without storage, all sizes interleaved: us (x the first size)")
    by = {r.name: r.seconds for r in rows}
    for kind in SAMPLERS:
        base = by[f"{kind} {sizes[0]:.0e}"]
        cells = [
            f"{by[f'{kind} {n:.0e}'] * 1e6:8.1f} ({by[f'{kind} {n:.0e}'] / base:.2f}x)"
            for n in sizes
        ]
        print(f"{kind:<14}" + "".join(f" {c:>20}" for c in cells))


def print_table(sizes: list[int], where: list[str], table: list[dict[str, float]]) -> None:
    names = ["limit", *SAMPLERS, "limit (prioritized buffer)", *[f"{n} draw" for n in SAMPLERS]]
    head = f"{'row':<28}" + "".join(
        f" {f'{n:,} {w}':>24}" for n, w in zip(sizes, where, strict=True)
    )
    print(f"\n## W2 sample({BATCH}) vs stored steps: us/call (x the first size; x limit)")
    print(f"{head}\n{'-' * len(head)}")
    for name in names:
        line = f"{name:<28}"
        for res in table:
            us = res[name] * 1e6
            growth = res[name] / table[0][name]
            limit = res["limit (prioritized buffer)" if name == "prioritized" else "limit"]
            rel = (
                "" if name.startswith("limit") or "draw" in name else f"; {res[name] / limit:.1f}L"
            )
            line += f" {f'{us:,.1f} ({growth:.2f}x{rel})':>24}"
        print(line)


def plot(sizes: list[int], where: list[str], table: list[dict[str, float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.8))
    for name, style in (
        ("limit", "k--"),
        ("uniform", "C0o-"),
        ("windows", "C1s-"),
        ("prioritized", "C2^-"),
        ("limit (prioritized buffer)", "k:"),
        ("uniform draw", "C0o:"),
        ("windows draw", "C1s:"),
        ("prioritized draw", "C2^:"),
    ):
        ax.plot(sizes, [r[name] * 1e6 for r in table], style, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(
        f"stored steps ({', '.join(f'{n:.0e} {w}' for n, w in zip(sizes, where, strict=True))})"
    )
    ax.set_ylabel(f"us per sample({BATCH}) (median)")
    ax.set_title("recollect W2 sampling vs buffer size (8 envs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M and 10M only")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results/scale.png")
    parser.add_argument("--ram-100m", action="store_true", help="100M in RAM, not memmap")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", help="comma list of stored steps (overrides --quick)")
    parser.add_argument(
        "--dir",
        default=os.environ.get("RECOLLECT_BENCH_DIR"),
        help="parent directory of the 100M memmap files",
    )
    args = parser.parse_args()
    args.repeat_s = 0.05
    sizes = [1_000_000, 10_000_000] + ([] if args.quick else [100_000_000])
    if args.sizes:
        sizes = [int(float(n)) for n in args.sizes.split(",")]
    print(f"W2, {E} envs, batch {BATCH}, numpy {np.__version__}")
    table, where = [], []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in sizes:
            memmap = n >= 100_000_000 and not args.ram_100m
            where.append("memmap" if memmap else "RAM")
            table.append(time_size(n, Path(tmp) if memmap else None, args))
    print_table(sizes, where, table)
    draw_table(sizes, args)
    plot(sizes, where, table, args.out)
    print(f"\ncurve: {args.out}")


if __name__ == "__main__":
    main()
