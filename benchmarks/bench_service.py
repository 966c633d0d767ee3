"""Replay service benchmark (issue 13): W2 data served to 8 writers and 1 learner.

Run ``python benchmarks/bench_service.py`` (about 6 minutes) or with ``--quick``
(about 2 minutes). The script re-executes itself in a loopback-only network
namespace (``unshare -rn`` + ``ip link set lo up``) when it is not in one and
the machine allows it; Ray only ever binds 127.0.0.1.

Data: W2 of WORKLOADS.md (observation f32[17], action f32[6], reward f32,
next_observation f32[17], done as the ``is_last`` bool leaf), capacity 1M,
64 env rows: 8 writers x 8 envs, ``add_batch`` of 8 envs, chunks of 64 steps.

Each of five set-ups is measured in this one process run:

* ``local``: a ``ReplayBuffer`` used directly, one writer thread (8 envs) and the
  learner in this process: the limit reference.
* ``embedded``: ``rc.service.Server``, 8 writer threads x 8 envs.
* ``ray 1 shard`` / ``ray 4 shards``: ``rc.ray.serve``; 8 writer actor
  processes (``num_cpus=0``) that ``rc.ray.connect(name)``. Their chunks go over
  each shard's Unix socket (``local_writes``, the default on one node).
* ``ray 1 shard, chunks as Ray calls``: ``serve(..., local_writes=False)``,
  insert figures only: the path writers on other nodes take.

Figures (each the median over repeats of a timed window):

* insert steps/s, writers alone ("alone") and while the learner samples
  ("with learner"); a writer's steps count once flushed.
* sample transitions/s, uniform batch 256, learner alone: ``client.sample`` one
  request at a time, and a ``SampleStream`` (what the dataset adapters read:
  ``--in-flight`` requests outstanding, ``--batches-per-request`` batches each).
* PER learner steps/s: prioritized table (alpha 0.6, beta 0.4), one step =
  sample 256 + ``update_priorities(256)`` (not waited for: the client holds
  updates back and sends them along with its next sample request), one step at
  a time and from a ``SampleStream`` as above.

Ratios are to the local row of the same run, to issue 13's targets over Ray on
one machine (insert >= 500k steps/s, sample >= 500k transitions/s, PER >= 1,000
steps/s) and to Reverb's figures on the same workload (insert 4.6k-7k steps/s,
sample 42k-54k transitions/s, PER 30 steps/s; the upper end is used).

Usage: ``python benchmarks/bench_service.py [--quick] [--repeats N]
[--only local,embedded,ray1,ray4,ray1-calls] [--chunk-length 64] [--in-flight 2]
[--batches-per-request 8,32]``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recollect as rc
from _common import Row, cycle, print_table
from bench_core import W2_CAPACITY, W2_FIELDS, w2_steps

WRITERS, ENVS, BATCH, BETA = 8, 8, 256, 0.4
CHUNK, IN_FLIGHT = 64, 4  # writers: steps per row per chunk, chunks in flight
TARGETS = {"insert": 500_000, "sample": 500_000, "per": 1_000}
REVERB = {"insert": (4_600, 7_000), "sample": (42_000, 54_000), "per": (30, 30)}
#: the "limited" table's SampleToInsertRatio (as the Ape-X example: windows sampled per
#: step inserted, room for every writer's chunks in flight plus a few batches)
SPI = 1.0
LOOPBACK_ENV = "RECOLLECT_LOOPBACK_NS"


# -- loopback network namespace ----------------------------------------------------------
def only_loopback() -> bool:
    """Whether this process sees no network interface but ``lo``."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def reexec_in_loopback() -> None:
    """Re-executes this script in a new user + network namespace with only ``lo`` (up)."""
    if only_loopback() or os.environ.get(LOOPBACK_ENV) or shutil.which("unshare") is None:
        return
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        print("# unshare -rn not allowed here: running in the host namespace", flush=True)
        return
    os.environ[LOOPBACK_ENV] = "1"
    script = 'ip link set lo up && exec "$0" "$@"'
    os.execvp("unshare", ["unshare", "-rn", "bash", "-c", script, sys.executable, *sys.argv])


# -- tables --------------------------------------------------------------------------------
def spec() -> dict[str, rc.ArraySpec]:
    return {k: rc.ArraySpec(s, d) for k, (s, d) in W2_FIELDS.items()}


def tables() -> dict[str, rc.ReplayBuffer]:
    """The uniform table, the prioritized one (alpha 0.6) and a uniform one with a
    SampleToInsertRatio limiter, 64 rows, capacity 1M each."""
    per = rc.Prioritized(priority_exponent=0.6, epsilon=1e-6)
    room = SPI * WRITERS * ENVS * CHUNK * IN_FLIGHT + BATCH * 8
    limiter = rc.SampleToInsertRatio(SPI, BATCH * 4, room)
    return {
        "uniform": rc.ReplayBuffer(spec(), W2_CAPACITY, WRITERS * ENVS, rng=0),
        "limited": rc.ReplayBuffer(
            spec(), W2_CAPACITY, WRITERS * ENVS, rate_limiter=limiter, rng=0
        ),
        "per": rc.ReplayBuffer(
            spec(), W2_CAPACITY, WRITERS * ENVS, sampler=per, sequence_length=1, rng=0
        ),
    }


# -- writers and learners ----------------------------------------------------------------------
def write_loop(
    client: Any, table: str, steps: list, start_at: float, stop_at: float, max_adds: int | None
) -> tuple[int, float]:
    """One writer of ``ENVS`` envs adding from ``start_at`` to ``stop_at`` (or ``max_adds``
    batches); returns ``(steps flushed, seconds from start to flush)``."""
    with client.writer(table, ENVS, chunk_length=CHUNK, max_in_flight=IN_FLIGHT) as writer:
        time.sleep(max(0.0, start_at - time.time()))
        n, limit, k = 0, max_adds or 1 << 62, len(steps)
        start = time.time()
        while n < limit and (n & 63 or time.time() < stop_at):
            writer.add_batch(steps[n % k])
            n += 1
        writer.flush()
        return n * ENVS, time.time() - start


class WriterActor:
    """A writer process of the Ray set-ups (one client per service it writes to)."""

    def __init__(self, steps: list) -> None:
        self.steps = steps
        self.clients: dict[str, Any] = {}

    def run(
        self, service: str, table: str, start_at: float, stop_at: float, max_adds: int | None
    ) -> tuple[int, float]:
        import recollect.ray as rr

        client = self.clients.get(service)
        if client is None:
            client = self.clients[service] = rr.connect(service)
        return write_loop(client, table, self.steps, start_at, stop_at, max_adds)

    def forget(self, service: str) -> None:
        self.clients.pop(service, None)


def loop_until(stop_at: float, fn: Callable[[], object]) -> tuple[int, float]:
    """Calls ``fn`` until ``stop_at``; returns ``(calls, seconds)``."""
    n, start = 0, time.time()
    while time.time() < stop_at:
        fn()
        n += 1
    return n, time.time() - start


class Setup:
    """One set-up: how to insert with 8 writers, and sample/PER clients."""

    name: str
    client: Any = None  # the service's client (None: the local buffer)
    insert_only = False  # measure the insert figures only

    def insert(
        self, table: str, start_at: float, stop_at: float, max_adds=None, writers=WRITERS
    ) -> float:
        """Steps/s of ``writers`` writers together (sum of each writer's steps / its seconds)."""
        raise NotImplementedError

    def sampler(self) -> Callable[[], Any]:
        raise NotImplementedError

    def per(self) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        """``(sample, update)`` of a PER learner step."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def prio_pool(seed: int = 1) -> Callable[[], np.ndarray]:
    rng = np.random.default_rng(seed)
    pool = [rng.random(BATCH) * 2 + 1e-3 for _ in range(64)]
    return cycle(pool)


class LocalSetup(Setup):
    name = "local (ReplayBuffer, 1 writer thread)"

    def __init__(self, steps: list) -> None:
        self.steps = steps
        per = rc.Prioritized(priority_exponent=0.6, epsilon=1e-6)
        self.buffers = {
            "uniform": rc.ReplayBuffer(spec(), W2_CAPACITY, ENVS, rng=0),
            "per": rc.ReplayBuffer(spec(), W2_CAPACITY, ENVS, sampler=per, sequence_length=1),
        }

    def insert(
        self, table: str, start_at: float, stop_at: float, max_adds=None, writers=1
    ) -> float:
        buf, steps = self.buffers[table], self.steps
        time.sleep(max(0.0, start_at - time.time()))
        n, limit, start = 0, max_adds or 1 << 62, time.time()
        while n < limit and (n & 63 or time.time() < stop_at):
            buf.add_batch(steps[n % len(steps)])
            n += 1
        return n * ENVS / (time.time() - start)

    def sampler(self) -> Callable[[], Any]:
        buf = self.buffers["uniform"]
        return lambda: buf.sample(BATCH)

    def per(self) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        buf, prios = self.buffers["per"], prio_pool()
        return (
            lambda: buf.sample(BATCH, importance_sampling_exponent=BETA),
            lambda s: buf.update_priorities(s.ids, prios()),
        )


class EmbeddedSetup(Setup):
    name = "embedded Server (8 writer threads)"

    def __init__(self, steps: list) -> None:
        self.steps = steps
        self.server = rc.service.Server(tables())
        self.client = self.server.client()

    def insert(
        self, table: str, start_at: float, stop_at: float, max_adds=None, writers=WRITERS
    ) -> float:
        with concurrent.futures.ThreadPoolExecutor(writers) as pool:
            runs = [
                pool.submit(
                    write_loop, self.server.client(), table, self.steps, start_at, stop_at, max_adds
                )
                for _ in range(writers)
            ]
            return sum(steps / secs for steps, secs in (r.result() for r in runs))

    def sampler(self) -> Callable[[], Any]:
        client = self.client
        return lambda: client.sample("uniform", BATCH)

    def per(self) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        client, prios = self.client, prio_pool()
        return (
            lambda: client.sample("per", BATCH, importance_sampling_exponent=BETA),
            lambda s: client.update_priorities("per", s.ids, prios()),
        )

    def close(self) -> None:
        self.client.close()
        self.server.close()


class RaySetup(Setup):
    def __init__(self, writers: list, num_shards: int, local_writes: bool = True) -> None:
        import recollect.ray as rr

        self.name = f"ray {num_shards} shard{'s' * (num_shards > 1)}"
        self.service = f"bench-{num_shards}"
        if not local_writes:  # the insert path before chunk sockets, for comparison
            self.name += ", chunks as Ray calls"
            self.service += "-calls"
            self.insert_only = True
        self.writers = writers
        self.client = rr.serve(
            tables(), num_shards=num_shards, name=self.service, local_writes=local_writes
        )

    def insert(
        self, table: str, start_at: float, stop_at: float, max_adds=None, writers=WRITERS
    ) -> float:
        import ray

        runs = [
            w.run.remote(self.service, table, start_at, stop_at, max_adds)
            for w in self.writers[:writers]
        ]
        return sum(steps / secs for steps, secs in ray.get(runs))

    def sampler(self) -> Callable[[], Any]:
        client = self.client
        return lambda: client.sample("uniform", BATCH)

    def per(self) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        client, prios = self.client, prio_pool()
        return (
            lambda: client.sample("per", BATCH, importance_sampling_exponent=BETA),
            lambda s: client.update_priorities("per", s.ids, prios()),
        )

    def close(self) -> None:
        import ray

        ray.get([w.forget.remote(self.service) for w in self.writers])
        self.client.close()


# -- measuring ---------------------------------------------------------------------------------
def measure_setup(setup: Setup, args: argparse.Namespace) -> dict[str, float]:
    """Median figures of one set-up: ``{figure name: rate}``."""
    window = args.window_s
    out: dict[str, list[float]] = collections.defaultdict(list)
    fill_adds = args.fill // (WRITERS * ENVS) if not isinstance(setup, LocalSetup) else None
    if setup.insert_only:
        for _ in range(args.repeats):
            start = time.time() + 0.3
            out["insert alone"].append(setup.insert("uniform", start, start + window))
        return {k: statistics.median(v) for k, v in out.items()}
    t0 = time.time()
    if isinstance(setup, LocalSetup):
        setup.insert("per", time.time(), float("inf"), args.fill // ENVS)
    else:
        setup.insert("per", time.time() + 0.2, float("inf"), fill_adds)
    print(
        f"#   {setup.name}: PER table filled with {args.fill:,} steps in {time.time() - t0:.1f} s",
        flush=True,
    )
    sample = setup.sampler()
    per_sample, per_update = setup.per()
    for _ in range(args.repeats):
        start = time.time() + 0.3
        out["insert alone"].append(setup.insert("uniform", start, start + window))
        # writers and learner together: the learner samples in this thread meanwhile
        start = time.time() + 0.3
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ins = pool.submit(setup.insert, "uniform", start, start + window)
            time.sleep(max(0.0, start - time.time()))
            calls, secs = loop_until(start + window, sample)
            out["insert with learner"].append(ins.result())
            out["sample with writers"].append(calls * BATCH / secs)
        start = time.time() + 0.3
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ins = pool.submit(setup.insert, "uniform", start, start + window, None, 2)
            time.sleep(max(0.0, start - time.time()))
            calls, secs = loop_until(start + window, sample)
            ins.result()
            out["sample with 2 writers"].append(calls * BATCH / secs)
        if setup.client is not None:  # writers busy on another table's shard(s): CPU share only
            start = time.time() + 0.3
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                ins = pool.submit(setup.insert, "per", start, start + window)
                time.sleep(max(0.0, start - time.time()))
                calls, secs = loop_until(start + window, sample)
                ins.result()
                out["sample with writers elsewhere"].append(calls * BATCH / secs)
            limited = limited_run(setup, window)
            out["sample limited"].append(limited[0])
            out["insert limited"].append(limited[1])
            out["ratio limited"].append(limited[2])
        calls, secs = loop_until(time.time() + window, sample)
        out["sample x1"].append(calls * BATCH / secs)
        calls, secs = loop_until(time.time() + window, lambda: per_update(per_sample()))
        out["per x1"].append(calls / secs)
        if setup.client is None:
            continue
        for k in args.per_request:
            opts = {"max_in_flight": args.in_flight, "batches_per_request": k}
            with rc.service.SampleStream(setup.client.table("uniform"), BATCH, **opts) as it:
                next(it)
                calls, secs = loop_until(time.time() + window, lambda it=it: next(it))
            out[f"sample stream {k}"].append(calls * BATCH / secs)
            handle = setup.client.table("per")
            with rc.service.SampleStream(
                handle, BATCH, importance_sampling_exponent=BETA, **opts
            ) as it:
                prios = prio_pool(2)
                next(it)
                calls, secs = loop_until(
                    time.time() + window,
                    lambda it=it, h=handle, p=prios: h.update_priorities(next(it).ids, p()),
                )
            out[f"per stream {k}"].append(calls / secs)
    return {k: statistics.median(v) for k, v in out.items()}


def limited_run(setup: Setup, window: float) -> tuple[float, float, float]:
    """8 writers and the learner (1 sample request at a time) on the SampleToInsertRatio
    table for ``window`` s; returns (transitions/s sampled, steps/s inserted, sampled
    windows per inserted step, which the limiter holds near ``SPI``)."""
    client = setup.client
    before = client.info("limited")
    start = time.time() + 0.3
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ins = pool.submit(setup.insert, "limited", start, start + window)
        time.sleep(max(0.0, start - time.time()))
        calls, t0 = 0, time.time()
        while not ins.done():  # until the writers flushed: their last chunks need samples
            try:
                client.sample("limited", BATCH, timeout=0.2)
                calls += 1
            except rc.errors.RateLimiterTimeout:
                pass
        secs = time.time() - t0
        inserted = ins.result()
    after = client.info("limited")
    ratio = (after.samples - before.samples) / max(after.inserts - before.inserts, 1)
    return calls * BATCH / secs, inserted, ratio


def report(results: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    local = next(iter(results))
    groups = [
        (
            "insert, 8 writers x 8 envs (steps/s)",
            "insert",
            ["insert alone", "insert with learner", "insert limited"],
        ),
        (
            "sample uniform 256 (transitions/s)",
            "sample",
            [
                "sample x1",
                *[f"sample stream {k}" for k in args.per_request],
                "sample with writers",
                "sample with 2 writers",
                "sample with writers elsewhere",
                "sample limited",
            ],
        ),
        (
            "PER learner: sample 256 + update_priorities 256 (learner steps/s)",
            "per",
            ["per x1", *[f"per stream {k}" for k in args.per_request]],
        ),
    ]
    labels = {
        "insert alone": "writers alone",
        "insert with learner": "while the learner samples",
        "sample x1": "1 request at a time",
        **{
            f"sample stream {k}": f"SampleStream {args.in_flight} x {k} batches"
            for k in args.per_request
        },
        "sample with writers": "1 at a time, while 8 writers insert",
        "sample with 2 writers": "1 at a time, while 2 writers insert",
        "sample with writers elsewhere": "1 at a time, 8 writers on another table",
        "sample limited": f"1 at a time, 8 writers, SampleToInsertRatio({SPI:g})",
        "insert limited": f"8 writers, SampleToInsertRatio({SPI:g}), learner sampling",
        "per x1": "1 step at a time",
        **{
            f"per stream {k}": f"SampleStream {args.in_flight} x {k} batches"
            for k in args.per_request
        },
    }
    for title, kind, figures in groups:
        rows = []
        for setup, figs in results.items():
            for fig in figures:
                if fig in figs:
                    name = f"{setup.split(' (')[0]}: {labels[fig]}"
                    rows.append(Row(name, None, 1, 1.0 / figs[fig]))
        lo, hi = REVERB[kind]
        target = Row("issue 13 target", None, 1, 1.0 / TARGETS[kind])
        reverb = Row(f"Reverb {lo:,}-{hi:,}" if lo != hi else f"Reverb {hi:,}", None, 1, 1.0 / hi)
        ref = next(r.name for r in rows if r.name.startswith(local.split(" (")[0]))
        print_table(title, [*rows, target, reverb], [ref, target.name, reverb.name])
    for setup, figs in results.items():
        if "ratio limited" in figs:
            print(
                f"# {setup.split(' (')[0]}: SampleToInsertRatio({SPI:g}) held samples/inserts at "
                f"{figs['ratio limited']:.3f}; learner with 8 writers "
                f"{figs['sample with writers'] / figs['sample x1']:.0%} of its solo rate, "
                f"with 2 writers {figs['sample with 2 writers'] / figs['sample x1']:.0%}, "
                f"with 8 writers on another table's shard "
                f"{figs['sample with writers elsewhere'] / figs['sample x1']:.0%}, "
                f"rate-limited {figs['sample limited'] / figs['sample x1']:.0%}"
            )


def main() -> None:
    global CHUNK  # read by write_loop, which the writer actors receive pickled by value
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat of 2 s windows, 200k fill")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--only", default="local,embedded,ray1,ray4,ray1-calls")
    parser.add_argument("--chunk-length", type=int, default=CHUNK, help="steps per row per chunk")
    parser.add_argument(
        "--in-flight", type=int, default=2, help="SampleStream requests outstanding"
    )
    parser.add_argument(
        "--batches-per-request",
        dest="per_request",
        default="8,32",
        help="batches per SampleStream request (comma-separated: one row each)",
    )
    args = parser.parse_args()
    CHUNK = args.chunk_length
    args.per_request = [int(k) for k in str(args.per_request).split(",")]
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.window_s = 2.0 if args.quick else 5.0
    args.fill = 200_000 if args.quick else W2_CAPACITY
    only = args.only.split(",")
    reexec_in_loopback()
    print(
        f"# loopback-only namespace: {only_loopback()}; {os.cpu_count()} cores; "
        f"{args.repeats} repeat(s) of {args.window_s:g} s windows; chunks of {CHUNK} steps; "
        f"streams: {args.in_flight} requests in flight x {args.per_request} batches",
        flush=True,
    )
    steps = w2_steps(np.random.default_rng(2), (ENVS,))
    results: dict[str, dict[str, float]] = {}
    makers: list[tuple[str, Callable[[], Setup]]] = [
        ("local", lambda: LocalSetup(steps)),
        ("embedded", lambda: EmbeddedSetup(steps)),
    ]
    if {"ray1", "ray4", "ray1-calls"} & set(only):
        writers = start_ray(steps)
        makers += [(f"ray{n}", lambda n=n: RaySetup(writers, n)) for n in (1, 4)]
        makers.append(("ray1-calls", lambda: RaySetup(writers, 1, local_writes=False)))
    for key, make in makers:
        if key not in only:
            continue
        setup = make()
        try:
            results[setup.name] = measure_setup(setup, args)
        finally:
            setup.close()
        print(
            f"#   {setup.name}: "
            + ", ".join(f"{k} {v:,.0f}" for k, v in results[setup.name].items()),
            flush=True,
        )
    report(results, args)


def start_ray(steps: list) -> list:
    """Starts a loopback-only Ray session and the 8 writer actor processes (ready)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    ray.init(
        address="local", _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False
    )
    actor = ray.remote(num_cpus=0)(WriterActor)
    writers = [actor.remote(steps) for _ in range(WRITERS)]
    ray.get([w.__ray_ready__.remote() for w in writers])
    return writers


if __name__ == "__main__":
    main()
