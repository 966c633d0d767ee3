"""Scenario of ``test_cli_serve``: ``recollect serve`` in a subprocess, a client in this one.

Run as ``python serve_scenario.py CONFIG [SERVE OPTIONS]`` (inside the loopback namespace);
prints ``SCENARIO OK inserts=... samples=...`` and exits 0 on success.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np


def _wait_for_address(proc: subprocess.Popen, timeout_s: float) -> tuple[str, list[str]]:
    """Reads serve's stdout until it says it serves; returns the Ray address it printed."""
    deadline, lines = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("serving;"):
            found = [re.match(r"ray address: (\S+)", x) for x in lines]
            return next(m[1] for m in found if m), lines
    raise SystemExit("serve printed no address:\n" + "".join(lines))


def main(config: str, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "recollect", "serve", "--config", config, *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        address, lines = _wait_for_address(proc, 120)
        assert 'recollect.ray.connect("scenario")' in "".join(lines), lines
        if 'os.environ["RAY_AUTH_MODE"] = "token"' in "".join(lines):
            os.environ["RAY_AUTH_MODE"] = "token"  # before importing ray, as the snippet says
        import ray

        import recollect.ray

        ray.init(address=address, _node_ip_address="127.0.0.1")
        client = recollect.ray.connect("scenario")
        with client.writer("steps", 2, chunk_length=4) as writer:
            for t in range(12):
                writer.add_batch(
                    {"obs": np.full((2, 3), t, np.float32), "is_last": np.zeros(2, bool)}
                )
        sample = client.sample("steps", 8, timeout=30)
        info = client.info("steps")
        assert sample.data["obs"].shape == (8, 2, 3), sample.data["obs"].shape
        client.close()  # a connected client leaves the service running
        ray.shutdown()
        print(f"SCENARIO OK inserts={info.inserts} samples={info.samples}", flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        print(out, flush=True)
        print(f"serve exited {proc.returncode}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
