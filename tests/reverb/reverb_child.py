"""A Reverb server or writer in a child process, for the cross-process tests.

``python reverb_child.py serve [CHECKPOINT_DIR]``: serves the tables of :func:`tables` on
127.0.0.1, prints ``PORT <port>`` (flushed) and serves until its stdin closes (or reads a
line), then stops and exits 0.

``python reverb_child.py write ADDRESS TABLE N``: writes N two-step items through a
TrajectoryWriter to the server at ADDRESS (item i: ``x`` = steps i-1 and i of
``np.full(3, step, float32)``, ``name`` = ``"step <i>"``), prints ``WROTE <N>`` and exits.

``python reverb_child.py info ADDRESS TIMEOUT``: prints ``TABLES <name,...>`` from
``server_info(timeout)``, or ``DEADLINE`` when it raises DeadlineExceededError.
"""

from __future__ import annotations

import sys

import numpy as np

import recollect.reverb as reverb


def tables() -> list[reverb.Table]:
    """The served tables: ``uniform`` (no signature), ``prio``, ``queue`` (size 10)."""
    return [
        reverb.Table(
            "uniform",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            10_000,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            10_000,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table.queue("queue", 10),
    ]


def serve(checkpoint_dir: str | None) -> None:
    checkpointer = None
    if checkpoint_dir:
        checkpointer = reverb.platform.checkpointers_lib.DefaultCheckpointer(checkpoint_dir)
    server = reverb.Server(tables(), checkpointer=checkpointer)
    print(f"PORT {server.port}", flush=True)
    sys.stdin.readline()  # a line or EOF (the parent closed stdin or exited): stop
    server.stop()


def write(address: str, table: str, n: int) -> None:
    client = reverb.Client(address)
    with client.trajectory_writer(2) as writer:
        for i in range(n + 1):
            writer.append({"x": np.full(3, i, np.float32), "name": f"step {i}"})
            if i:
                writer.create_item(
                    table, 1.0, {"x": writer.history["x"][-2:], "name": writer.history["name"][-1]}
                )
    print(f"WROTE {n}", flush=True)


def info(address: str, timeout: float) -> None:
    try:
        names = sorted(reverb.Client(address).server_info(timeout=timeout))
    except reverb.errors.DeadlineExceededError:
        print("DEADLINE", flush=True)
    else:
        print(f"TABLES {','.join(names)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2] if len(sys.argv) > 2 else None)
    elif sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        info(sys.argv[2], float(sys.argv[3]))
