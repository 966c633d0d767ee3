"""A shard lets a draw waiting for the table lock go before the inserts that arrive after
it. Python's locks are not fair: a writer storing chunks back to back takes the lock
again right after releasing it, and a learner waiting for it got a fraction of its solo
sample rate (issue 23, item 13)."""

from __future__ import annotations

import socket
import threading

import numpy as np

import recollect as rc
from recollect.service.shard import Shard

SPEC = {"x": rc.ArraySpec((), np.float32)}


def test_a_draw_waits_for_at_most_a_few_inserts_of_writers_storing_back_to_back() -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 1 << 23, 8))  # never wraps here
    chunk = [np.zeros((2, 64), np.float32)]  # the flat leaves of one chunk
    leases = [shard.reserve(2, socket.gethostname(), 0)[0] for _ in range(4)]
    for lease_id in leases:
        shard.extend(lease_id, chunk)
    stop = threading.Event()

    def write(lease_id: int) -> None:
        while not stop.is_set():
            shard.extend(lease_id, chunk)

    writers = [threading.Thread(target=write, args=(lease,)) for lease in leases]
    for thread in writers:
        thread.start()
    waited = []  # inserts stored while a draw waited for the lock
    try:
        for _ in range(50):
            before = shard.buffer.table.inserts
            sample, _ = shard.sample(4)
            # table_size counts the windows the draw saw; 2 rows x 64 steps per insert
            waited.append((sample.table_size - before) // 128)
    finally:
        stop.set()
        for thread in writers:
            thread.join(10)
    print(f"\ninserts a draw waited for: max {max(waited)}, mean {np.mean(waited):.1f}")
    assert max(waited) <= 2 * len(leases)  # those already past the check when it came
