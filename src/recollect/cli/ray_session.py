"""Starting or joining Ray for the commands that need it (``serve``, ``demo --distributed``)."""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Any

import click

__all__ = ["import_ray", "init_ray"]

#: the IP a Ray started by a command binds to when none is given: loopback only
LOOPBACK = "127.0.0.1"
#: seconds a cluster's address has to accept a connection before the command gives up
PROBE_TIMEOUT_S = 5.0


def import_ray() -> Any:
    """``import ray``, or a ClickException saying which extra to install."""
    try:
        import ray
    except ImportError:
        raise click.ClickException('this command needs Ray: pip install "recollect[ray]"') from None
    return ray


def init_ray(address: str | None, node_ip_address: str | None = None, **kwargs: Any) -> str:
    """Joins the Ray cluster at ``address``, or starts a local one bound to loopback.

    Args:
        address: a cluster address (``"auto"``, ``"10.0.0.1:6379"``), or None to start
            a private local Ray on ``node_ip_address`` (default 127.0.0.1) without
            dashboard or usage stats.
        node_ip_address: this node's IP in the cluster (None: Ray's choice when joining).
        **kwargs: more ``ray.init`` arguments for a local start (``num_cpus``).

    Returns:
        The GCS address other processes pass to ``ray.init(address=...)``.
    """
    ray = import_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        ray.init(address="local", _node_ip_address=node_ip_address or LOOPBACK,
                 include_dashboard=False, **kwargs)  # fmt: skip
    else:
        check_cluster_answers(address)
        try:
            ray.init(address=address, _node_ip_address=node_ip_address)
        except ConnectionError as err:
            raise click.ClickException(
                f"cannot join the Ray cluster at {address!r}: {err}"
            ) from None
    return ray.get_runtime_context().gcs_address


def resolve_address(address: str) -> list[str]:
    """The ``host:port`` addresses ``ray.init(address=address)`` would try: ``RAY_ADDRESS``
    when set (it overrides the argument, as in Ray), else ``address``, where ``"auto"`` is
    the cluster last started on this machine (``ray_current_cluster`` in Ray's temp
    directory); a loopback host also as this node's IP (Ray connects there). Empty when
    ``"auto"`` finds nothing."""
    raw = os.environ.get("RAY_ADDRESS") or address
    if raw == "auto":
        tmp = os.environ.get("RAY_TMPDIR") or os.path.join(tempfile.gettempdir(), "ray")
        try:
            with open(os.path.join(tmp, "ray_current_cluster"), encoding="utf-8") as f:
                raw = f.read().strip()
        except OSError:
            return []
        if not raw:
            return []
    raw = raw.removeprefix("ray://")
    candidates = [raw]
    host, _, port = raw.rpartition(":")
    if host in ("127.0.0.1", "localhost"):
        try:
            from ray.util import get_node_ip_address

            candidates.append(f"{get_node_ip_address()}:{port}")
        except Exception:  # the loopback address is still probed
            pass
    return list(dict.fromkeys(candidates))


def _answers(address: str, timeout: float) -> str | None:
    """None when ``host:port`` accepts a TCP connection, else why not."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except (OSError, ValueError) as err:
        return str(err) or type(err).__name__


def check_cluster_answers(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raises a ClickException within seconds unless a Ray cluster accepts connections
    at ``address`` (``ray.init`` itself retries a dead address for minutes)."""
    hint = (
        "Start one first (ray start --head), pass its address (--ray-address HOST:PORT), "
        "or leave out --ray-address (and --detach) to serve on a private local Ray."
    )
    candidates = resolve_address(address)
    if not candidates:
        raise click.ClickException(
            f"no running Ray cluster found for --ray-address {address!r}. {hint}"
        )
    errors = []
    for candidate in candidates:
        why = _answers(candidate, timeout)
        if why is None:
            return
        errors.append(f"{candidate}: {why}")
    source = "" if candidates[0] == address else f" (resolved from {address!r})"
    raise click.ClickException(f"no Ray cluster answers at {', '.join(errors)}{source}. {hint}")
