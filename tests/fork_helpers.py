"""Forking a process that samples from a buffer, and telling a child that hangs."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

CHILD_TIMEOUT_S = 20.0


def fork_and_run(work: Callable[[], None], timeout_s: float = CHILD_TIMEOUT_S) -> str:
    """Forks; the child runs ``work()`` and exits. Returns ``"ok"``, ``"failed"`` (the
    child raised) or ``"hung"`` (still running after ``timeout_s``; it is killed)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "ok" if os.waitstatus_to_exitcode(status) == 0 else "failed"
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.002)
