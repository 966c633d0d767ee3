"""Shared pytest set-up.

- Slow tests run only in CI (CI=true) or with --run-slow.
- The run re-executes itself in a loopback-only network namespace (``unshare -rn``,
  then ``ip link set lo up``) when the machine allows it, so the servers and Ray
  clusters tests start can reach nothing but 127.0.0.1 (RECOLLECT_NO_NETNS=1 opts out).
- ``ray_session``: one loopback-only Ray session per test module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LOOPBACK = "RECOLLECT_LOOPBACK_NETNS"


def _reexec_in_loopback_namespace(config: pytest.Config) -> None:
    if os.environ.get(LOOPBACK) or os.environ.get("RECOLLECT_NO_NETNS") or sys.platform != "linux":
        return
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None:
        return
    probe = subprocess.run(
        [unshare, "-rn", "sh", "-c", "ip link set lo up"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        return
    os.environ[LOOPBACK] = "1"
    os.chdir(config.invocation_params.dir)
    command = [sys.executable, "-m", "pytest", *config.invocation_params.args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(
        unshare, [unshare, "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]
    )


def pytest_configure(config: pytest.Config) -> None:
    _reexec_in_loopback_namespace(config)
    config.addinivalue_line("markers", "ray: starts a loopback-only Ray session")


@pytest.fixture(scope="module")
def ray_session():
    """One Ray session for the test module, on 127.0.0.1 only (no dashboard, no usage stats)."""
    ray = pytest.importorskip("ray")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if ray.is_initialized():
        ray.shutdown()
    # workers import the test modules that define remote classes
    here = os.path.dirname(os.path.abspath(__file__))
    folders = [here, *sorted(str(p) for p in Path(here).iterdir() if p.is_dir())]
    before = os.environ.get("PYTHONPATH")
    # The raylet this starts, and so every worker, inherits the driver's environment: no
    # job runtime_env, one start-up step fewer (Ray's runtime-env agent). The one Ray
    # start-up failure seen in this suite (a driver that failed to register, ended by Ray
    # with exit code 1 and no output, the whole run with it) had a job runtime_env.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*folders, before) if p)
    ray.init(
        address="local",
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        num_cpus=2,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow") or os.environ.get("CI", "").lower() == "true":
        return
    skip = pytest.mark.skip(reason="slow: runs in CI (CI=true) or with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
