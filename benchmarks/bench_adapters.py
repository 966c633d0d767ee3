"""Adapter throughput: batches/s through tf.data, torch and jax vs ``buf.sample`` (W1, W2).

The first table holds the issue-17 target rows, timed interleaved in this one
process (one repeat of every row, then the next; medians): ``buf.sample``
itself, the W1 limit (a plain numpy gather of the same windows),
:func:`recollect.tf_data.as_dataset` iterated eagerly and consumed by a
``tf.function`` (16 batches per call, rate per batch; also after a ``.map``,
with AUTOTUNE parallel calls and a prefetch, and with neither), and
:func:`recollect.jax.as_iterator`, for W1 batch 32 (windows of 2) and W2
batch 256 (``num_steps=None``, the W2 spec with ``next_observation`` and
``is_last`` leaves, capacity 1M). ``--detail`` adds the W1 tables below.
``--isolated`` times each row alone instead (its pipeline built, warmed up,
timed and closed before the next row's is built): interleaved, a pipeline
that draws ahead while nobody reads (tf.data's injected prefetch after a
``map``, a ``prefetch``) banks batches while the other rows are timed.

W1 atari data (WORKLOADS.md): observation uint8 [84, 84, 4], action int64,
reward float32, is_last bool (episode ends with probability 0.01), filled with
random data in batches of 8 envs. A transition is a window of ``num_steps=2``
(next_observation is the following step, the ReplayBuffer's default way).
Capacity defaults to 20_000 steps (not W1's 100_000) to keep the run short;
``--capacity 100000`` gives the full size. Sampling cost does not depend on it
beyond cache effects.

Every row is measured in this one process: median batches/s over ``--repeats``
runs of ``--batches`` batches after a warm-up, and the ratio to calling
``buf.sample`` directly. A second table repeats the comparison with a
simulated accelerator step after each batch (``time.sleep(step_ms)``: the CPU
idles while the device trains), where a prefetching adapter overlaps sampling
with the step and the direct call cannot. The limit rows are a plain numpy
gather of the same windows and a memcpy of the same bytes. Consumers do
nothing with a batch but touch it, so the adapter rows measure pure delivery.
Adapter rows can exceed 1.0x: when no batch is ready, ``next()`` samples one
itself while the producer thread samples the next (two cores, the gathers
release the GIL). "(defaults)" rows use each adapter's default arguments. Run:
``python benchmarks/bench_adapters.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from recollect import ArraySpec, ReplayBuffer
from recollect.adapters.prefetch import sample_concurrent

NUM_ENVS = 8
BATCH = 32
NUM_STEPS = 2


def make_buffer(capacity: int) -> ReplayBuffer:
    spec = {
        "observation": ArraySpec((84, 84, 4), np.uint8),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "is_last": ArraySpec((), bool),
    }
    buf = ReplayBuffer(spec, capacity, num_envs=NUM_ENVS, rng=0)
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, (64, NUM_ENVS, 84, 84, 4), dtype=np.uint8)
    for t in range(capacity // NUM_ENVS):
        buf.add_batch(
            {
                "observation": obs[t % 64],
                "action": rng.integers(0, 18, NUM_ENVS),
                "reward": rng.standard_normal(NUM_ENVS).astype(np.float32),
                "is_last": rng.random(NUM_ENVS) < 0.01,
            }
        )
    return buf


def measure(next_batch: Callable[[], object], batches: int, repeats: int) -> float:
    for _ in range(max(5, batches // 10)):
        next_batch()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            next_batch()
        rates.append(batches / (time.perf_counter() - start))
    return statistics.median(rates)


def limit_rows(buf: ReplayBuffer) -> dict[str, Callable[[], object]]:
    views = buf.storage.flat_views
    rng = np.random.default_rng(1)
    capacity = buf.capacity

    def gather() -> object:
        idx = rng.integers(0, capacity - 1, BATCH)
        idx2 = idx[:, None] + np.arange(NUM_STEPS)
        return [v[idx2] for v in views]

    sample_bytes = sum(x.nbytes for x in gather())
    src = np.empty(sample_bytes, np.uint8)
    dst = np.empty_like(src)
    return {
        "limit: numpy gather store[idx]": gather,
        "limit: memcpy same bytes": lambda: np.copyto(dst, src),
    }


def adapter_rows(buf: ReplayBuffer, skip: set[str]) -> tuple[dict, list]:
    rows: dict[str, Callable[[], object]] = {}
    closers: list[Callable[[], None]] = []
    if "torch" not in skip:
        from torch.utils.data import DataLoader

        from recollect.adapters.torch import ReplayDataset

        ds0 = ReplayDataset(buf, BATCH, NUM_STEPS)
        it0 = iter(ds0)
        ds = ReplayDataset(buf, BATCH, NUM_STEPS, prefetch=4)
        it = iter(ds)
        loader_ds = ReplayDataset(buf, BATCH, NUM_STEPS, prefetch=4)
        loader = iter(DataLoader(loader_ds, batch_size=None))
        ds2 = ReplayDataset(buf, BATCH, NUM_STEPS, prefetch=4, num_threads=2)
        it2 = iter(ds2)
        rows["torch ReplayDataset (defaults)"] = lambda: next(it0)
        rows["torch ReplayDataset (prefetch 4)"] = lambda: next(it)
        rows["torch ReplayDataset (prefetch 4, 2 threads)"] = lambda: next(it2)
        rows["torch DataLoader(batch_size=None)"] = lambda: next(loader)
        closers += [ds0.close, ds.close, ds2.close, loader_ds.close]
    if "jax" not in skip:
        import jax

        from recollect.adapters.jax import as_iterator

        def jax_ready(batch: tuple) -> object:
            return jax.block_until_ready(batch[0])

        jit0 = as_iterator(buf, BATCH, NUM_STEPS)
        jit = as_iterator(buf, BATCH, NUM_STEPS, prefetch=4)
        jit2 = as_iterator(buf, BATCH, NUM_STEPS, prefetch=4, num_threads=2)
        rows["jax as_iterator (defaults)"] = lambda: jax_ready(next(jit0))
        rows["jax as_iterator (prefetch 4)"] = lambda: jax_ready(next(jit))
        rows["jax as_iterator (prefetch 4, 2 threads)"] = lambda: jax_ready(next(jit2))
        closers += [jit0.close, jit.close, jit2.close]
    if "tf" not in skip:
        import tensorflow as tf

        from recollect.adapters import tf_data as rc_tf_data

        plain = iter(rc_tf_data.as_dataset(buf, BATCH, NUM_STEPS))
        seq = iter(rc_tf_data.as_dataset(buf, BATCH, NUM_STEPS).prefetch(4))
        par = iter(rc_tf_data.as_dataset(buf, BATCH, NUM_STEPS, num_parallel_calls=2).prefetch(4))
        auto = iter(
            rc_tf_data.as_dataset(buf, BATCH, NUM_STEPS, num_parallel_calls=tf.data.AUTOTUNE)
        )
        rows["tf.data as_dataset (defaults)"] = lambda: next(plain)
        rows["tf.data as_dataset (.prefetch(4))"] = lambda: next(seq)
        rows["tf.data as_dataset (num_parallel_calls=2)"] = lambda: next(par)
        rows["tf.data as_dataset (AUTOTUNE)"] = lambda: next(auto)
        rows["tf.data AUTOTUNE, consumed in tf.function"] = _in_graph(buf, tf)
    return rows, closers


def _in_graph(buf: ReplayBuffer, tf: object) -> Callable[[], object]:
    """Batches pulled by a ``tf.function`` training loop (16 per call; rate is per batch)."""
    from recollect.adapters import tf_data as rc_tf_data

    auto = tf.data.AUTOTUNE
    dataset = rc_tf_data.as_dataset(buf, BATCH, NUM_STEPS, num_parallel_calls=auto).prefetch(4)
    iterator = iter(dataset)
    per_call = 16

    @tf.function
    def steps() -> object:
        total = tf.constant(0, tf.int64)
        for _ in tf.range(per_call):
            items, info = next(iterator)
            first_pixel = tf.cast(items["observation"][0, 0, 0, 0, 0], tf.int64)
            total += tf.reduce_sum(info.ids) + first_pixel
        return total

    state = {"left": 0}

    def next_batch() -> object:
        if state["left"] == 0:
            steps()
            state["left"] = per_call
        state["left"] -= 1
        return None

    return next_batch


W2_FIELDS = {
    "observation": ((17,), np.float32),
    "action": ((6,), np.float32),
    "reward": ((), np.float32),
    "next_observation": ((17,), np.float32),
    "is_last": ((), np.bool_),
}
W2_BATCH = 256
GRAPH_PER_CALL = 16  # batches a tf.function call consumes


def make_w2_buffer(capacity: int) -> ReplayBuffer:
    """The W2 buffer: 8 envs, filled to ``capacity`` from a pool of 256 random steps."""
    spec = {k: ArraySpec(shape, dtype) for k, (shape, dtype) in W2_FIELDS.items()}
    buf = ReplayBuffer(spec, capacity, num_envs=NUM_ENVS, rng=0)
    rng = np.random.default_rng(2)
    pool = [
        {
            k: (
                rng.random(NUM_ENVS) < 1e-3
                if d == np.bool_
                else rng.standard_normal((NUM_ENVS, *s))
            )
            for k, (s, d) in W2_FIELDS.items()
        }
        for _ in range(256)
    ]
    pool = [{k: np.asarray(v, W2_FIELDS[k][1]) for k, v in step.items()} for step in pool]
    for t in range(capacity // NUM_ENVS):
        buf.add_batch(pool[t % 256])
    return buf


def in_tf_function(dataset: object, tf: object) -> Callable[[], object]:
    """``next_batch`` served by a ``tf.function`` consuming ``GRAPH_PER_CALL`` batches a call."""
    iterator = iter(dataset)

    @tf.function
    def steps() -> object:
        total = tf.constant(0, tf.int64)
        for _ in tf.range(GRAPH_PER_CALL):
            items, info = next(iterator)
            first = tf.cast(tf.reshape(items["observation"], [-1])[0], tf.int64)
            total += tf.reduce_sum(info.ids) + first
        return total

    state = {"left": 0}

    def next_batch() -> object:
        if state["left"] == 0:
            steps()
            state["left"] = GRAPH_PER_CALL
        state["left"] -= 1
        return None

    return next_batch


Factory = Callable[[], tuple[Callable[[], object], Callable[[], None] | None]]


def target_factories(
    name: str, buf: ReplayBuffer, batch: int, num_steps: int | None, skip: set[str]
) -> dict[str, Factory]:
    """The issue-17 rows of one workload as factories: each builds its pipeline when called
    and returns ``(next_batch, close or None)``; ``buf.sample`` first, then each adapter."""
    rows: dict[str, Factory] = {
        f"{name} buf.sample({batch}, {num_steps})": lambda: (
            lambda: buf.sample(batch, num_steps),
            None,
        )
    }
    if name == "W1":
        gather = limit_rows(buf)["limit: numpy gather store[idx]"]
        rows[f"{name} limit: numpy gather"] = lambda: (gather, None)
    if "tf" not in skip:
        import tensorflow as tf

        from recollect.adapters.tf_data import as_dataset

        def eager() -> tuple[Callable[[], object], None]:
            it = iter(as_dataset(buf, batch, num_steps).prefetch(4))
            return (lambda: next(it)), None

        def graph() -> tuple[Callable[[], object], None]:
            dataset = as_dataset(buf, batch, num_steps, num_parallel_calls=tf.data.AUTOTUNE)
            return in_tf_function(dataset.prefetch(4), tf), None

        def mapped() -> tuple[Callable[[], object], None]:
            dataset = as_dataset(buf, batch, num_steps, num_parallel_calls=tf.data.AUTOTUNE)
            dataset = dataset.map(lambda items, info: (items, info)).prefetch(4)
            return in_tf_function(dataset, tf), None

        def sequential() -> tuple[Callable[[], object], None]:
            dataset = as_dataset(buf, batch, num_steps).map(lambda items, info: (items, info))
            return in_tf_function(dataset, tf), None

        rows[f"{name} tf.data eager"] = eager
        rows[f"{name} tf.data in tf.function"] = graph
        rows[f"{name} tf.data .map in tf.function"] = mapped
        rows[f"{name} tf.data .map, no parallel calls"] = sequential
    if "jax" not in skip and name == "W1":
        import jax

        from recollect.adapters.jax import as_iterator

        def jax_row() -> tuple[Callable[[], object], Callable[[], None]]:
            it = as_iterator(buf, batch, num_steps)
            return (lambda: jax.block_until_ready(next(it)[0])), it.close

        rows[f"{name} jax as_iterator"] = jax_row
    return rows


def target_rows(
    name: str, buf: ReplayBuffer, batch: int, num_steps: int | None, skip: set[str]
) -> tuple[dict[str, Callable[[], object]], list[Callable[[], None]]]:
    """Every row of :func:`target_factories` built at once (their pipelines all live)."""
    rows: dict[str, Callable[[], object]] = {}
    closers: list[Callable[[], None]] = []
    for row, factory in target_factories(name, buf, batch, num_steps, skip).items():
        rows[row], close = factory()
        if close is not None:
            closers.append(close)
    return rows, closers


def isolated(factories: dict[str, Factory], batches: int, repeats: int) -> dict:
    """Median batches/s of every row timed alone: its pipeline is built, warmed up, timed
    ``repeats`` times in a row and closed before the next row's is built, so no pipeline
    draws ahead in the background while another row is timed."""
    results = {}
    for name, factory in factories.items():
        fn, close = factory()
        results[name] = measure(fn, batches, repeats)  # warm-up, then repeats in a row
        if close is not None:
            close()
        del fn, close
        gc.collect()
    return results


def interleaved(rows: dict[str, Callable[[], object]], batches: int, repeats: int) -> dict:
    """Median batches/s of every row, timed interleaved (one repeat of each row, then the next)."""
    for fn in rows.values():  # warm-up (traces the tf.functions, starts the threads)
        for _ in range(max(5, batches // 10)):
            fn()
    rates: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            start = time.perf_counter()
            for _ in range(batches):
                fn()
            rates[name].append(batches / (time.perf_counter() - start))
    return {name: statistics.median(r) for name, r in rates.items()}


def print_targets(args: argparse.Namespace, skip: set[str]) -> None:
    """The issue-17 table: W1 batch 32 and W2 batch 256 through the adapters vs ``buf.sample``."""
    print(
        f"issue-17 rows: W1 capacity={args.w1_capacity}, W2 capacity={args.w2_capacity}, "
        f"{NUM_ENVS} envs; {args.batches} batches x {args.repeats} repeats, "
        f"{'each row alone' if args.isolated else 'interleaved'}, medians"
    )
    print(f"{'row':36s} {'batches/s':>10s} {'x buf.sample':>13s}")
    workloads = [("W1", args.w1_capacity, make_buffer, BATCH, NUM_STEPS)]
    workloads.append(("W2", args.w2_capacity, make_w2_buffer, W2_BATCH, None))
    for name, capacity, make, batch, num_steps in workloads:
        if name.lower() not in args.workloads:
            continue
        buf = make(capacity)
        if args.isolated:
            factories = target_factories(name, buf, batch, num_steps, skip)
            results = isolated(factories, args.batches, args.repeats)
        else:
            rows, closers = target_rows(name, buf, batch, num_steps, skip)
            results = interleaved(rows, args.batches, args.repeats)
            for close in closers:
                close()
            del rows
        base = next(iter(results.values()))
        for row, rate in results.items():
            print(f"{row:36s} {rate:10.0f} {rate / base:13.2f}", flush=True)
        del buf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--w1-capacity", type=int, default=100_000)
    parser.add_argument("--w2-capacity", type=int, default=1_000_000)
    parser.add_argument("--workloads", default="w1,w2", help="comma list of w1,w2")
    parser.add_argument("--detail", action="store_true", help="also the W1 detail tables")
    parser.add_argument("--capacity", type=int, default=20_000, help="W1 detail tables")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="8k capacity, 100 batches x 3")
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="time each target row alone (its pipeline built, timed and closed before the next)",
    )
    parser.add_argument("--skip", default="", help="comma list of torch,jax,tf to skip")
    parser.add_argument(
        "--step-ms", type=float, default=1.0, help="simulated train step per batch (0: off)"
    )
    args = parser.parse_args()
    if args.quick:
        args.capacity, args.batches, args.repeats = 8_000, 100, 3
    skip = set(filter(None, args.skip.split(",")))
    print_targets(args, skip)
    if args.detail:
        print_detail(args, skip)


def print_detail(args: argparse.Namespace, skip: set[str]) -> None:
    """The W1 detail table (limits, every adapter variant) and the simulated-step table."""
    buf = make_buffer(args.capacity)
    print(
        f"W1 adapters: capacity={args.capacity}, num_envs={NUM_ENVS}, batch={BATCH}, "
        f"num_steps={NUM_STEPS}, {args.batches} batches x {args.repeats} repeats (median)"
    )
    direct = {
        "buf.sample(32, 2) direct": lambda: buf.sample(BATCH, NUM_STEPS),
        "sample_concurrent (adapters' path)": lambda: sample_concurrent(buf, BATCH, NUM_STEPS),
    }
    rows, closers = adapter_rows(buf, skip)
    results = {}
    for name, fn in {**limit_rows(buf), **direct, **rows}.items():
        results[name] = measure(fn, args.batches, args.repeats)
    for close in closers:
        close()
    base = results["buf.sample(32, 2) direct"]
    gather = results["limit: numpy gather store[idx]"]
    header = f"{'row':44s} {'batches/s':>10s} {'transitions/s':>14s}"
    print(f"{header} {'x sample':>9s} {'x gather':>9s}")
    for name, rate in results.items():
        line = f"{name:44s} {rate:10.0f} {rate * BATCH:14.0f}"
        print(f"{line} {rate / base:9.2f} {rate / gather:9.2f}")
    if args.step_ms > 0:
        print_with_step(buf, skip, args)


def print_with_step(buf: ReplayBuffer, skip: set[str], args: argparse.Namespace) -> None:
    """Each batch followed by a simulated accelerator step that idles the CPU (``time.sleep``)."""
    step_s = args.step_ms / 1000

    def with_step(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            out = fn()
            time.sleep(step_s)
            return out

        return run

    rows, closers = adapter_rows(buf, skip)
    rows = {"buf.sample(32, 2) direct": lambda: buf.sample(BATCH, NUM_STEPS), **rows}
    batches = max(50, args.batches // 3)
    results = {name: measure(with_step(fn), batches, args.repeats) for name, fn in rows.items()}
    for close in closers:
        close()
    base = results["buf.sample(32, 2) direct"]
    ideal = 1 / step_s
    print(f"\nwith a simulated {args.step_ms:g} ms accelerator step per batch", end=" ")
    print(f"(ideal {ideal:.0f}/s)")
    print(f"{'row':44s} {'batches/s':>10s} {'x sample':>9s} {'x ideal':>9s}")
    for name, rate in results.items():
        print(f"{name:44s} {rate:10.0f} {rate / base:9.2f} {rate / ideal:9.2f}")


if __name__ == "__main__":
    main()
