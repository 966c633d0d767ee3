"""Reverb-API throughput: W2 transitions through TrajectoryWriters, sample(256), PER step.

Runs the same Reverb calls against ``recollect.reverb`` (default) or dm-reverb
(``--reverb``, in a venv that has it)::

    python benchmarks/bench_reverb_api.py --items 20000
    /work/reverb-venv/bin/python benchmarks/bench_reverb_api.py --reverb --items 20000

W2 transition: float32 observation [17], float32 action [6], float32 reward,
float32 discount, int32 step type; an item is 2 steps of every column (165 bytes
of data per transition when both steps are counted once per step).
"""

from __future__ import annotations

import argparse
import resource
import threading
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reverb", action="store_true", help="use dm-reverb instead")
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200, help="learner steps to time")
    args = ap.parse_args()
    if args.reverb:
        import reverb
    else:
        import recollect.reverb as reverb

    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(0.6),
        reverb.selectors.Fifo(),
        1_000_000,
        reverb.rate_limiters.MinSize(1),
    )
    server = reverb.Server([table])
    client = server.localhost_client()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_writer = args.items // args.writers

    def write(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with client.trajectory_writer(2) as w:
            for i in range(per_writer + 1):
                w.append(
                    {
                        "observation": rng.random(17, dtype=np.float32),
                        "action": rng.random(6, dtype=np.float32),
                        "reward": np.float32(i),
                        "discount": np.float32(1.0),
                        "step_type": np.int32(1),
                    }
                )
                if i >= 1:
                    w.create_item(
                        "t",
                        1.0,
                        {
                            k: w.history[k][-2:]
                            for k in ("observation", "action", "reward", "discount", "step_type")
                        },
                    )

    t0 = time.perf_counter()
    threads = [threading.Thread(target=write, args=(s,)) for s in range(args.writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    insert_s = time.perf_counter() - t0
    n = table.info.current_size
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"insert: {n} items in {insert_s:.2f}s = {n / insert_s:,.0f} items/s")
    print(f"memory: ~{(rss1 - rss0) * 1024 / n:,.0f} B/item (max RSS growth)")

    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    got = 0
    for _ in range(20):
        got += sum(1 for _ in client.sample("t", 256, emit_timesteps=False))
    s = time.perf_counter() - t0
    print(f"client.sample(256) generator: {got / s:,.0f} transitions/s")
    if not args.reverb:
        t0 = time.perf_counter()
        for _ in range(args.steps):
            info, _data = client.sample_batch("t", 256)
        s = time.perf_counter() - t0
        print(f"sample_batch(256): {args.steps * 256 / s:,.0f} transitions/s")
        t0 = time.perf_counter()
        for _ in range(args.steps):
            info, _data = client.sample_batch("t", 256)
            w = (info.table_size * info.probability) ** -0.4
            w /= w.max()
            client.update_priorities("t", info.key, rng.random(256) + 0.1)
        s = time.perf_counter() - t0
        print(
            f"learner step (sample_batch + IS weights + update_priorities): {args.steps / s:,.0f}/s"
        )
    t0 = time.perf_counter()
    steps = max(5, args.steps // 20)
    for _ in range(steps):
        samples = list(client.sample("t", 256, emit_timesteps=False))
        keys = [x.info.key for x in samples]
        probs = np.array([x.info.probability for x in samples])
        w = (samples[0].info.table_size * probs) ** -0.4
        client.mutate_priorities(
            "t", updates=dict(zip(keys, (rng.random(256) + 0.1).tolist(), strict=True))
        )
    s = time.perf_counter() - t0
    print(f"learner step (Reverb calls: sample + weights + mutate_priorities): {steps / s:,.1f}/s")
    server.stop()


if __name__ == "__main__":
    main()
