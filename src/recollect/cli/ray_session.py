"""Starting or joining Ray for the commands that need it (``serve``, ``demo --distributed``)."""

from __future__ import annotations

import os
from typing import Any

import click

__all__ = ["import_ray", "init_ray"]

#: the IP a Ray started by a command binds to when none is given: loopback only
LOOPBACK = "127.0.0.1"


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
        try:
            ray.init(address=address, _node_ip_address=node_ip_address)
        except ConnectionError as err:
            raise click.ClickException(
                f"cannot join the Ray cluster at {address!r}: {err}"
            ) from None
    return ray.get_runtime_context().gcs_address
