"""A forked child samples even when a thread of its parent held the table's locks at fork."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from fork_helpers import fork_and_run
from recollect import ArraySpec, Prioritized, ReplayBuffer

SPEC = {"x": ArraySpec((3,), np.float32), "n": ArraySpec((), np.int32)}


@pytest.fixture
def in_clean_process(request) -> bool:
    """True in a fresh interpreter that runs just this test; otherwise runs it there (the
    suite's process has JAX, TF and Ray threads, whose own state a fork copies too) and
    returns False once it passed."""
    if os.environ.get("RECOLLECT_FORK_TEST_CHILD"):
        return True
    env = dict(os.environ, RECOLLECT_FORK_TEST_CHILD="1", RECOLLECT_NO_NETNS="1")
    node = f"{request.node.path}::{request.node.name}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", node, "-q", "-p", "no:cacheprovider"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return False


def _buffer(**kwargs) -> ReplayBuffer:
    buf = ReplayBuffer(SPEC, 64, num_envs=2, rng=0, **kwargs)
    for i in range(10):
        buf.add_batch({"x": np.full((2, 3), i, np.float32), "n": np.full(2, i, np.int32)})
    return buf


def _sample_in_child(buf: ReplayBuffer) -> None:
    sample = buf.sample(4, 2)
    assert sample.data["x"].shape == (4, 2, 3)


def _held_lock(buf: ReplayBuffer, which: str):
    return {"table": buf.table.lock, "rng": buf.table.rng.bit_generator.lock}[which]


@pytest.mark.parametrize("which", ["table", "rng"])
@pytest.mark.parametrize("prioritized", [False, True])
def test_child_samples_while_a_parent_thread_holds_a_lock(which, prioritized, in_clean_process):
    if not in_clean_process:
        return
    kwargs = {"sampler": Prioritized(), "sequence_length": 2} if prioritized else {}
    buf = _buffer(**kwargs)
    held, release = threading.Event(), threading.Event()

    def hold():
        with _held_lock(buf, which):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(10)
    try:
        outcome = fork_and_run(lambda: _sample_in_child(buf), timeout_s=10)
    finally:
        release.set()
        thread.join(10)
    assert outcome == "ok"
    assert buf.sample(4, 2).data["n"].shape == (4, 2)  # the parent's lock still works


def test_lock_the_forking_thread_holds_stays_held_and_usable_in_the_child(in_clean_process):
    if not in_clean_process:
        return
    buf = _buffer()

    def child():
        buf.table.lock.release()  # the lock held across fork is released by its holder
        _sample_in_child(buf)
        buf.table.lock.acquire()

    with buf.table.lock:
        assert fork_and_run(child, timeout_s=10) == "ok"
    assert buf.sample(4, 2).data["n"].shape == (4, 2)
