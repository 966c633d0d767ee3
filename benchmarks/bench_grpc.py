"""The gRPC transport on loopback: trivial calls per second and array round-trip MB/s.

    python benchmarks/bench_grpc.py [--seconds 3] [--process]

Serves a small object on 127.0.0.1, in this process (the server's threads and the
client's share the GIL) or with ``--process`` in a spawned process, and reports:
``noop()`` calls/s on one channel from one thread; items/s of a server stream
(``stream("repeat", ...)``, 1,000 small dicts per call); and for a 10 MB float64 array
sent and returned (``echo(a=...)``), MB/s of array data (one direction counted).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from recollect import grpc as rg


class Target:
    def noop(self) -> None:
        return None

    def echo(self, a: np.ndarray) -> np.ndarray:
        return a

    def repeat(self, n: int) -> Any:
        item = {"x": np.zeros(4, np.float32)}
        return (item for _ in range(n))


def _rate(call, seconds: float) -> float:
    call()  # warm-up: connect
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
    return count / (time.perf_counter() - start)


def _serve_in_child(conn: Any) -> None:
    with rg.serve(Target()) as server:
        conn.send(server.address)
        conn.recv()


@contextmanager
def _served(in_process: bool) -> Iterator[str]:
    if in_process:
        with rg.serve(Target()) as server:
            yield server.address
        return
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve_in_child, args=(child,), daemon=True)
    process.start()
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        process.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--process", action="store_true", help="serve in another process")
    options = parser.parse_args()
    seconds = options.seconds
    array = np.random.default_rng(0).random(10 * 2**20 // 8)
    with _served(not options.process) as address, rg.connect(address) as channel:
        calls = _rate(lambda: channel.call("noop", {}), seconds)
        trips = _rate(lambda: channel.call("echo", {"a": array}), seconds)
        streams = _rate(lambda: sum(1 for _ in channel.stream("repeat", {"n": 1000})), seconds)
    result = {
        "server": "another process" if options.process else "this process",
        "trivial_calls_per_s": round(calls),
        "round_trip_10MB_per_s": round(trips, 1),
        "round_trip_MB_per_s": round(trips * array.nbytes / 1e6),
        "streamed_items_per_s": round(streams * 1000),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
