"""W3 (WORKLOADS.md): prioritized replay learner steps per second at capacity 1M.

One learner step = ``sample(256, importance_sampling_exponent=0.4)`` (data,
ids, probabilities, weights) + ``update_priorities(ids, 256 new values)``.
Data: W2 transitions (observation f32[17], action f32[6], reward f32,
next_observation f32[17], done bool), filled in batches of 8 (8 env rows).

Rows measured in the same process:

* ``recollect W3``            the full learner step through ``ReplayBuffer``.
* ``  sampler only``          ``Prioritized.sample`` + ``update_priorities`` (no data gather).
* ``  sum tree only``         ``SumTree.find`` + ``SumTree.set`` of 256.
* ``limit: gather``           ``rng.integers`` + ``store[idx]`` per field (uniform, no priorities).
* ``limit: copy``             ``np.copyto`` of the same bytes as one gather.
* ``naive numpy PER``         ``rng.choice(N, 256, p=p)`` + ``p[idx] = ...`` (O(N) per step).
* ``  batch-normalised``      the learner step with ``weight_normalization="batch"``
  (the tree keeps no minimum): the line below the table prints what the default
  ``"buffer"`` costs extra, the median over the repeats of each repeat's CPU-time
  ratio of the two rows (they run next to each other, so load hits both alike).
* ``cpprb PER``               (when cpprb is installed; ``--no-peers`` skips it)
  ``cpprb.PrioritizedReplayBuffer(alpha=0.6)`` on the same data, its default way
  (next observations a second copy): ``sample(256, beta=0.4)`` + ``update_priorities``.

Rows are timed interleaved (one repeat of every row, then the next repeat), so
load from other processes hits all rows alike; ratios are to rows of this run.

``--add`` appends an actor step to every learner step of the recollect and cpprb
rows: ``add_batch`` of one transition per env row (8), so the ring overwrites the
oldest windows (zeroing them in the tree) while the learner samples and updates.

``--heap`` measures the heap selectors instead (issue 26, item 7): a
``MaxHeap`` table of 131,072 windows, one learner step = ``sample(256)`` +
``update_priorities`` of the drawn ids, with every priority tied (a fresh
table) and with distinct priorities, without and with ``max_times_sampled=1``
(then 256 distinct windows, best first, and an insert of 256 keeps the size);
the limit row is a numpy ``argmax`` + set over the priorities.

Usage: ``python benchmarks/bench_prioritized.py [--quick] [--repeats 5] [--no-peers] [--add]
[--heap]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import recollect as rc

BATCH = 256
SPEC = {
    "observation": rc.ArraySpec((17,), np.float32),
    "action": rc.ArraySpec((6,), np.float32),
    "reward": rc.ArraySpec((), np.float32),
    "next_observation": rc.ArraySpec((17,), np.float32),
    "done": rc.ArraySpec((), np.bool_),
}


def fill(capacity: int, num_envs: int = 8, **kwargs: Any) -> rc.ReplayBuffer:
    sampler = rc.Prioritized(priority_exponent=0.6, epsilon=1e-6, **kwargs)
    buf = rc.ReplayBuffer(SPEC, capacity, num_envs, sampler=sampler, sequence_length=1, rng=0)
    rng = np.random.default_rng(0)
    chunk = {k: rng.random((1024, num_envs, *s.shape)).astype(s.dtype) for k, s in SPEC.items()}
    for i in range(capacity // num_envs):
        buf.add_batch({k: v[i % 1024] for k, v in chunk.items()})
    return buf


def cpprb_fill(capacity: int) -> Any:
    """cpprb's PrioritizedReplayBuffer (alpha 0.6) with ``capacity`` W2 transitions, or None."""
    if importlib.util.find_spec("cpprb") is None:
        return None
    import cpprb

    shapes = {"obs": 17, "act": 6, "rew": 1, "next_obs": 17, "done": 1}
    env_dict = {k: {"shape": v, "dtype": np.float32} for k, v in shapes.items()}
    per = cpprb.PrioritizedReplayBuffer(capacity, env_dict, alpha=0.6, eps=1e-6)
    rng = np.random.default_rng(0)
    chunk = {k: rng.random((8192, v)).astype(np.float32) for k, v in shapes.items()}
    for _ in range(-(-capacity // 8192)):
        per.add(**chunk)
    return per


def rates(
    fns: list[Callable[[], object]],
    calls: list[int],
    repeats: int,
    cpu_runs: list[list[float]] | None = None,
) -> list[tuple[float, float]]:
    """Median calls/s of each ``fns[k]`` over ``repeats`` runs of ``calls[k]`` calls, by wall
    clock and by CPU time, the functions interleaved (one run of each per repeat).

    The CPU-time rate (``time.process_time``) is what an idle machine would give
    a single-threaded loop; on a shared machine the wall-clock rate is lower.
    ``cpu_runs``, when given, receives each function's CPU-time rate of every repeat.
    """
    for fn, n in zip(fns, calls, strict=True):
        for _ in range(max(1, n // 10)):
            fn()
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for k, (fn, n) in enumerate(zip(fns, calls, strict=True)):
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                fn()
            wall[k].append(n / (time.perf_counter() - start))
            cpu[k].append(n / max(time.process_time() - start_cpu, 1e-9))
    if cpu_runs is not None:
        cpu_runs[:] = cpu
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu, strict=True)]


def rows(
    buf: rc.ReplayBuffer,
    calls: int,
    repeats: int,
    per: Any = None,
    batch_buf: rc.ReplayBuffer | None = None,
    add: bool = False,
    cpu_runs: list[list[float]] | None = None,
) -> list[tuple[str, tuple[float, float]]]:
    rng = np.random.default_rng(1)
    capacity = buf.capacity
    prios = [rng.random(BATCH) * 2 for _ in range(64)]
    k = [0]
    # --add: one transition per env row after each learner step (as 8 actors would)
    plus = " + add 8" if add else ""
    new = [{n: rng.random((8, *s.shape)).astype(s.dtype) for n, s in SPEC.items()} for _ in prios]

    def learner_step() -> None:
        s = buf.sample(BATCH, importance_sampling_exponent=0.4)
        k[0] = (k[0] + 1) % 64
        buf.update_priorities(s.ids, prios[k[0]])
        if add:
            buf.add_batch(new[k[0]])

    sampler = buf.reader.sampler

    def sampler_step() -> None:
        d = sampler.sample(BATCH, 1, False, buf.reader.rng, importance_sampling_exponent=0.4)
        sampler.update_priorities(rc.ids.encode(d.rows, d.times), prios[0])

    tree = sampler._tree

    def tree_step() -> None:
        keys = tree.find(rng.random(BATCH) * tree.total)
        tree.set(keys, prios[1])

    store = [a.reshape(capacity, *a.shape[2:]).copy() for a in buf.storage.arrays]

    def gather() -> None:
        idx = rng.integers(0, capacity, BATCH)
        for a in store:
            a[idx]

    nbytes = sum(a[:BATCH].nbytes for a in store)
    src, dst = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)

    def copy() -> None:
        np.copyto(dst, src)

    p = rng.random(capacity)
    p /= p.sum()

    def naive() -> None:
        idx = rng.choice(capacity, BATCH, p=p / p.sum())
        p[idx] = prios[2] / capacity

    table = [
        (f"recollect W3 (sample 256 + weights + update 256{plus})", learner_step, calls),
        ("  sampler only (no data gather)", sampler_step, calls),
        ("  sum tree only (find 256 + set 256)", tree_step, calls),
        ("limit: gather (uniform idx, store[idx] per field)", gather, calls),
        ("limit: copy (np.copyto, same bytes)", copy, calls),
        ("naive numpy PER (rng.choice p=, O(N))", naive, max(3, calls // 200)),
    ]
    if batch_buf is not None:

        def batch_step() -> None:
            s = batch_buf.sample(BATCH, importance_sampling_exponent=0.4)
            k[0] = (k[0] + 1) % 64
            batch_buf.update_priorities(s.ids, prios[k[0]])
            if add:
                batch_buf.add_batch(new[k[0]])

        table.insert(1, (f"  batch-normalised (no minimum kept){plus}", batch_step, calls))
    if per is not None:
        peer_new = [
            {
                "obs": t["observation"],
                "act": t["action"],
                "rew": t["reward"][:, None],
                "next_obs": t["next_observation"],
                "done": t["done"][:, None].astype(np.float32),
            }
            for t in new
        ]

        def cpprb_step() -> None:
            s = per.sample(BATCH, beta=0.4)
            k[0] = (k[0] + 1) % 64
            per.update_priorities(s["indexes"], prios[k[0]])
            if add:
                per.add(**peer_new[k[0]])

        table.append((f"cpprb PER (sample 256 + weights + update 256{plus})", cpprb_step, calls))
    measured = rates([fn for _, fn, _ in table], [n for _, _, n in table], repeats, cpu_runs)
    return [(name, r) for (name, _, _), r in zip(table, measured, strict=True)]


HEAP_SPEC = {"x": rc.ArraySpec((), np.int64)}


def heap_rows(size: int, calls: int, repeats: int) -> list[tuple[str, tuple[float, float]]]:
    """The ``--heap`` rows (module doc): MaxHeap learner steps at ``size`` windows."""
    rng = np.random.default_rng(0)
    prios = [rng.random(BATCH) for _ in range(64)]
    steps = {"x": np.arange(BATCH, dtype=np.int64)}

    def heap(distinct: bool, max_times: int) -> Callable[[], None]:
        buf = rc.ReplayBuffer(
            HEAP_SPEC,
            size,
            BATCH,
            sampler=rc.MaxHeap(),
            sequence_length=1,
            max_times_sampled=max_times,
            rng=0,
        )
        for _ in range(size // BATCH):
            buf.add_batch(steps)
        if distinct:
            ids = buf.reader.item_ids().reshape(-1)
            buf.update_priorities(ids, rng.permutation(len(ids)) / len(ids))
        k = [0]

        def step() -> None:
            s = buf.sample(BATCH)
            k[0] = (k[0] + 1) % 64
            buf.update_priorities(s.ids, prios[k[0]])
            if max_times:  # the drawn windows are gone: refill 256 (one add_batch)
                buf.add_batch(steps)

        return step

    values = rng.random(size)

    def argmax() -> None:
        top = int(values.argmax())
        values[top] = prios[0][0]

    table = [
        ("MaxHeap sample 256 + update (ties)", heap(False, 0), calls),
        ("MaxHeap sample 256 + update (distinct)", heap(True, 0), calls),
        ("MaxHeap mts=1: 256 distinct + update + add (ties)", heap(False, 1), calls),
        ("MaxHeap mts=1: 256 distinct + update + add (distinct)", heap(True, 1), calls),
        ("limit: numpy argmax + set", argmax, calls),
    ]
    measured = rates([fn for _, fn, _ in table], [n for _, _, n in table], repeats)
    return [(name, r) for (name, _, _), r in zip(table, measured, strict=True)]


def main_heap(args: argparse.Namespace) -> None:
    size = args.capacity or 131_072
    calls = 100 if args.quick else 300
    results = heap_rows(size, calls, args.repeats)
    limit = results[-1][1]
    print(f"heap selectors, {size:,} windows, batch {BATCH}")
    print(f"median of {args.repeats} repeats x {calls} calls; cpu = rate by process CPU time")
    print(f"{'row':56s} {'steps/s':>10s} {'ms/step':>8s} {'x argmax':>9s} {'cpu steps/s':>12s}")
    for name, (wall, cpu) in results:
        print(f"{name:56s} {wall:10,.0f} {1e3 / wall:8.3f} {wall / limit[0]:9.4f} {cpu:12,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="capacity 100k, fewer calls")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--capacity", type=int, default=None)
    parser.add_argument("--no-peers", action="store_true", help="skip the cpprb row")
    parser.add_argument("--add", action="store_true", help="add 8 transitions per learner step")
    parser.add_argument("--heap", action="store_true", help="the MaxHeap rows instead")
    args = parser.parse_args()
    if args.heap:
        main_heap(args)
        return
    capacity = args.capacity or (100_000 if args.quick else 1_000_000)
    calls = 300 if args.quick else 1000
    start = time.perf_counter()
    buf = fill(capacity)
    fill_s = time.perf_counter() - start
    batch_buf = fill(capacity, weight_normalization="batch")
    per = None if args.no_peers else cpprb_fill(capacity)
    cpu_runs: list[list[float]] = []
    results = rows(buf, calls, args.repeats, per, batch_buf, args.add, cpu_runs)
    gather, copy = results[4][1], results[5][1]
    actor = " + add 8 per learner step" if args.add else ""
    print(f"W3 prioritized, capacity {capacity:,}, batch {BATCH}, alpha 0.6, beta 0.4{actor}")
    print(
        f"fill: {capacity:,} transitions in batches of 8 in {fill_s:.1f} s "
        f"({capacity / fill_s:,.0f} transitions/s)"
    )
    print(f"median of {args.repeats} repeats x {calls} calls; cpu = rate by process CPU time")
    print(
        f"{'row':58s} {'steps/s':>10s} {'x gather':>9s} {'x copy':>8s} {'x cpprb':>8s} "
        f"{'cpu steps/s':>12s} {'cpu x gather':>12s} {'cpu x cpprb':>12s}"
    )
    peer = results[-1][1] if per is not None else (math.nan, math.nan)
    for name, (wall, cpu) in results:
        print(
            f"{name:58s} {wall:10,.0f} {wall / gather[0]:9.3f} {wall / copy[0]:8.4f} "
            f"{wall / peer[0]:8.2f} {cpu:12,.0f} {cpu / gather[1]:12.3f} {cpu / peer[1]:12.2f}"
        )
    # rows 0 and 1: buffer- and batch-normalised learner steps, timed next to each other
    paired = statistics.median(b / a for a, b in zip(cpu_runs[0], cpu_runs[1], strict=True))
    print(
        f'"buffer" weight normalisation (the tree\'s minimum) costs {paired - 1:+.1%} CPU time '
        f'per learner step vs "batch" (median of the {args.repeats} paired repeats; '
        f"{1e6 / results[0][1][1]:.0f} vs {1e6 / results[1][1][1]:.0f} us)"
    )


if __name__ == "__main__":
    main()
