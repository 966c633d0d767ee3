"""Reverb-API throughput: W2 transitions through TrajectoryWriters, sample(256), PER step.

Runs the same Reverb calls against ``recollect.reverb`` (default) or dm-reverb
(``--reverb``, in a venv that has it)::

    python benchmarks/bench_reverb_api.py --items 20000
    python benchmarks/bench_reverb_api.py --items 20000 --across-processes
    /work/reverb-venv/bin/python benchmarks/bench_reverb_api.py --reverb --items 20000
    python benchmarks/bench_reverb_api.py --compare --rounds 3 --items 20000

``--across-processes``: the server runs in a child process (this script with ``--serve``)
and the client reaches it over gRPC (recollect.grpc), as a separate actor and learner
would. ``--compare``: runs "ours in-process", "ours across processes" and dm-reverb (with
``--reverb-python``, default /work/reverb-venv/bin/python, when it exists) one after
another for ``--rounds`` rounds (interleaved: a loaded machine slows all alike) and
prints a table of the medians.

W2 transition: float32 observation [17], float32 action [6], float32 reward,
float32 discount, int32 step type; an item is 2 steps of every column (165 bytes
of data per transition when both steps are counted once per step). Memory is the
server process's max RSS growth per item.

Each writer cycles through its own pool of 1,024 steps made before the clock starts
(every append still copies its arrays), so the insert row measures the replay system.
``--fresh-data`` makes each step inside the timed loop instead: numpy's ``Generator.random``
releases the GIL on every call, so 8 writer threads then also pay two GIL hand-offs per
step (in-process, ours drops from about 52k to 20k items/s; dm-reverb from 9k to 7k).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

FIELDS = ("observation", "action", "reward", "discount", "step_type")
POOL = 1024  # steps made per writer before the clock starts


def _rss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def make_server(reverb: Any) -> Any:
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(0.6),
        reverb.selectors.Fifo(),
        1_000_000,
        reverb.rate_limiters.MinSize(1),
    )
    return reverb.Server([table])


def serve() -> None:
    """The ``--serve`` child: prints ``PORT <port> RSS <KiB>``, serves until stdin has a line,
    prints ``RSS <KiB>`` (max RSS) and exits."""
    import recollect.reverb as reverb

    server = make_server(reverb)
    print(f"PORT {server.port} RSS {_rss_kib()}", flush=True)
    sys.stdin.readline()
    print(f"RSS {_rss_kib()}", flush=True)
    server.stop()


class _ChildServer:
    """A ``--serve`` child of this script and its address (over gRPC)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", __file__, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        words = self.process.stdout.readline().split()  # type: ignore[union-attr]
        if len(words) != 4 or words[0] != "PORT":
            self.process.kill()
            raise RuntimeError(f"the server child printed {words!r}")
        self.address = f"localhost:{words[1]}"
        self.rss0 = int(words[3])

    def stop(self) -> int:
        """Stops the child; returns its max RSS (KiB)."""
        self.process.stdin.write("stop\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(30)
        return int(line.split()[1])


def run(args: argparse.Namespace) -> dict[str, float]:
    """One configuration's numbers (also printed, one line each)."""
    if args.reverb:
        import reverb
    else:
        import recollect.reverb as reverb

    def make_step(rng: np.random.Generator, i: int) -> dict[str, Any]:
        return {
            "observation": rng.random(17, dtype=np.float32),
            "action": rng.random(6, dtype=np.float32),
            "reward": np.float32(i),
            "discount": np.float32(1.0),
            "step_type": np.int32(1),
        }

    pools = [  # before the RSS baseline: memory counts the server, not the pools
        [make_step(np.random.default_rng(seed), i) for i in range(POOL)]
        for seed in range(0 if args.fresh_data else args.writers)
    ]

    child = None
    if args.across_processes:
        child = _ChildServer()
        server = None
        client = reverb.Client(child.address)
        client.server_info(timeout=60)
        rss0 = child.rss0
    else:
        server = make_server(reverb)
        client = server.localhost_client()
        rss0 = _rss_kib()
    per_writer = args.items // args.writers
    out: dict[str, float] = {}

    def write(seed: int) -> None:
        rng = np.random.default_rng(seed)
        pool = pools[seed] if pools else None
        with client.trajectory_writer(2) as w:
            for i in range(per_writer + 1):
                w.append(make_step(rng, i) if pool is None else pool[i % POOL])
                if i >= 1:
                    w.create_item("t", 1.0, {k: w.history[k][-2:] for k in FIELDS})

    t0 = time.perf_counter()
    threads = [threading.Thread(target=write, args=(s,)) for s in range(args.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    insert_s = time.perf_counter() - t0
    n = client.server_info()["t"].current_size
    out["insert_items_per_s"] = n / insert_s
    print(f"insert: {n} items in {insert_s:.2f}s = {n / insert_s:,.0f} items/s")
    if child is None:
        out["bytes_per_item"] = (_rss_kib() - rss0) * 1024 / n
        print(f"memory: ~{out['bytes_per_item']:,.0f} B/item (max RSS growth)")

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    got = 0
    for _ in range(20):
        got += sum(1 for _ in client.sample("t", 256, emit_timesteps=False))
    s = time.perf_counter() - t0
    out["sample_256_per_s"] = got / s
    print(f"client.sample(256) generator: {got / s:,.0f} transitions/s")
    if not args.reverb:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            info, _data = client.sample_batch("t", 256)
        s = time.perf_counter() - t0
        out["sample_batch_256_per_s"] = args.steps * 256 / s
        print(f"sample_batch(256): {args.steps * 256 / s:,.0f} transitions/s")
        t0 = time.perf_counter()
        for _ in range(args.steps):
            info, _data = client.sample_batch("t", 256)
            w = (info.table_size * info.probability) ** -0.4
            w /= w.max()
            client.update_priorities("t", info.key, rng.random(256) + 0.1)
        s = time.perf_counter() - t0
        out["learner_batch_per_s"] = args.steps / s
        print(
            f"learner step (sample_batch + IS weights + update_priorities): {args.steps / s:,.0f}/s"
        )
    t0 = time.perf_counter()
    steps = max(50, args.steps // 4)  # dm-reverb: ~25 ms a step; fewer steps were noisy
    for _ in range(steps):
        samples = list(client.sample("t", 256, emit_timesteps=False))
        keys = [x.info.key for x in samples]
        probs = np.array([x.info.probability for x in samples])
        w = (samples[0].info.table_size * probs) ** -0.4
        client.mutate_priorities(
            "t", updates=dict(zip(keys, (rng.random(256) + 0.1).tolist(), strict=True))
        )
    s = time.perf_counter() - t0
    out["learner_reverb_per_s"] = steps / s
    print(f"learner step (Reverb calls: sample + weights + mutate_priorities): {steps / s:,.1f}/s")
    if child is not None:
        out["bytes_per_item"] = (child.stop() - rss0) * 1024 / n
        print(f"memory: ~{out['bytes_per_item']:,.0f} B/item (server's max RSS growth)")
    else:
        server.stop()
    return out


ROWS = {
    "insert_items_per_s": "insert, 8 TrajectoryWriters (items/s)",
    "sample_256_per_s": "client.sample(256) (transitions/s)",
    "sample_batch_256_per_s": "sample_batch(256) (transitions/s)",
    "learner_reverb_per_s": "learner step, Reverb calls (/s)",
    "learner_batch_per_s": "learner step, sample_batch + update_priorities (/s)",
    "bytes_per_item": "memory (B per item, max RSS growth)",
}


def compare(args: argparse.Namespace) -> None:
    """Each configuration once per round, in a fresh process; a table of medians."""
    common = ["--items", str(args.items), "--writers", str(args.writers)]
    common += ["--steps", str(args.steps), "--json"]
    if args.fresh_data:
        common.append("--fresh-data")
    configs = {
        "ours in-process": [sys.executable, __file__, *common],
        "ours across processes": [sys.executable, __file__, *common, "--across-processes"],
    }
    if os.path.exists(args.reverb_python):
        configs["dm-reverb 0.14 (in-process)"] = [args.reverb_python, __file__, *common, "--reverb"]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    for round_ in range(args.rounds):
        for name, argv in configs.items():
            done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False)
            lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
            if done.returncode or not lines:
                print(f"{name}: failed (exit {done.returncode}): {done.stderr[-2000:]}")
                continue
            results[name].append(json.loads(lines[-1]))
            print(f"round {round_ + 1}, {name}: {lines[-1]}", flush=True)
    names = list(configs)
    print(f"\n| | {' | '.join(names)} |")
    print(f"|---|{'---:|' * len(names)}")
    for key, label in ROWS.items():
        cells = []
        for name in names:
            values = [r[key] for r in results[name] if key in r]
            cells.append(f"{statistics.median(values):,.0f}" if values else "-")
        print(f"| {label} | {' | '.join(cells)} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reverb", action="store_true", help="use dm-reverb instead")
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200, help="learner steps to time")
    ap.add_argument(
        "--across-processes", action="store_true", help="server in a child, client over gRPC"
    )
    ap.add_argument(
        "--fresh-data", action="store_true", help="make each step inside the timed insert loop"
    )
    ap.add_argument("--compare", action="store_true", help="all configurations, a table")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reverb-python", default="/work/reverb-venv/bin/python")
    ap.add_argument("--json", action="store_true", help="print the numbers as a JSON line")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve()
    elif args.compare:
        compare(args)
    else:
        out = run(args)
        if args.json:
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
