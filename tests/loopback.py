"""Runs a command inside a loopback-only network namespace when the machine allows it.

``unshare -rn`` (an unprivileged user + network namespace) gives the command a
network with nothing but ``lo``: a Ray it starts can reach no other host and
no other test's Ray. Where ``unshare`` is missing or not permitted the command
runs in the ordinary network (the tests still bind Ray to 127.0.0.1).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["loopback_available", "run_in_loopback"]

_PREFIX = ["unshare", "-rn", "bash", "-c", 'ip link set lo up && exec "$@"', "loopback"]


@functools.cache
def loopback_available() -> bool:
    """Whether ``unshare -rn`` works here (probed once)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    try:
        probe = subprocess.run([*_PREFIX, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def run_in_loopback(
    argv: Sequence[str], timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``subprocess.run(argv)`` in a loopback-only namespace when available, else as is.

    Ray's usage stats are off in the child; stdout and stderr are captured as text.
    """
    child_env = dict(os.environ if env is None else env, RAY_USAGE_STATS_ENABLED="0")
    prefix = _PREFIX if loopback_available() else []
    return subprocess.run(
        [*prefix, *argv], capture_output=True, text=True, timeout=timeout_s, env=child_env
    )
