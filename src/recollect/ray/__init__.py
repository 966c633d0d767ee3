"""Tables served as Ray actors, split into shards: ``serve`` and ``connect``.

Install the extra (``pip install "recollect[ray]"``); ``import recollect``
never imports Ray. Each table is split into ``num_shards`` actors (rows and
capacity split evenly) that Ray places, optionally one per node
(``placement="spread"``). The client is the one of the in-process
:class:`~recollect.service.Server`; sampling over shards is exact.

Start or join Ray first (``ray.init(...)``; these functions never start one,
so where Ray listens stays the caller's choice). Example::

    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False)
    client = recollect.ray.serve({"replay": buf}, num_shards=4, name="apex")
    # in any process of the cluster:
    client = recollect.ray.connect("apex")
"""

from __future__ import annotations

import os
import uuid
from typing import Any, cast

import ray

from recollect.buffers import ReplayBuffer
from recollect.errors import InvalidArgumentError, StateError
from recollect.ray.actor import NAMESPACE, Directory, RayEndpoint, ShardActor
from recollect.service import Client
from recollect.service.shard import check_tables, shard_config

__all__ = ["NAMESPACE", "SHARD_THREADS", "connect", "serve", "shard_locations"]

#: threads of a shard actor: calls it runs at once (rate-limited waits included); more
#: wait in Ray's queue
SHARD_THREADS = 256

_ShardActor = ray.remote(ShardActor)
_Directory = ray.remote(Directory)


def _strategy(placement: Any, shard: int) -> Any:
    """The Ray scheduling strategy of shard ``shard``: "spread" pins shard ``k`` to the
    ``k % num_nodes``-th alive node (Ray's soft affinity and SPREAD both let shards of
    ``num_cpus=0`` actors share a node)."""
    if placement is None or placement == "default":
        return "DEFAULT"
    if placement == "spread":
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
        return NodeAffinitySchedulingStrategy(node_id=nodes[shard % len(nodes)], soft=False)
    if isinstance(placement, str):
        raise InvalidArgumentError(
            f"`placement` must be None, 'default', 'spread' or a Ray scheduling strategy; got "
            f"{placement!r}."
        )
    return placement


def _require_ray() -> None:
    if not ray.is_initialized():
        raise StateError(
            "Ray is not initialized in this process: call ray.init(address=...) to join a "
            "cluster, or ray.init(address='local', _node_ip_address='127.0.0.1') for a "
            "loopback-only one, before serve() or connect()."
        )


def _shard_counts(num_shards: Any, tables: dict[str, ReplayBuffer]) -> dict[str, int]:
    if isinstance(num_shards, dict):
        unknown = set(num_shards) - set(tables)
        if unknown or set(tables) - set(num_shards):
            raise InvalidArgumentError(
                f"`num_shards` as a dict needs one count per table {sorted(tables)}; got keys "
                f"{sorted(num_shards)}."
            )
        return dict(num_shards)
    return dict.fromkeys(tables, num_shards)


def serve(
    tables: dict[str, ReplayBuffer],
    num_shards: int | dict[str, int] = 1,
    name: str | None = None,
    placement: Any = None,
    *,
    checkpoint_dir: str | os.PathLike | None = None,
    lease_timeout: float = 60.0,
    local_writes: bool = True,
    max_restarts: int = 0,
    detached: bool = False,
    rng: Any = None,
) -> Client:
    """Starts each table as ``num_shards`` Ray actors; returns a client that owns them.

    Args:
        tables: ``{name: ReplayBuffer}``: each buffer's configuration (spec,
            capacity, num_envs, sampler, rate limiter, ``max_times_sampled``)
            is what is served; the buffer must be empty (to serve stored data,
            checkpoint it and pass ``checkpoint_dir``).
        num_shards: actors per table (an int for every table, or ``{table: int}``);
            ``num_envs`` must be a multiple of it.
        name: the service's name for :func:`connect` (default: a unique one,
            in ``client.name``).
        placement: None (Ray decides), ``"spread"`` (shard ``k`` on the
            ``k % num_nodes``-th alive node, one per node while there are enough)
            or any Ray ``scheduling_strategy`` (for every shard).
        checkpoint_dir: shards restore from it (at start and after a restart)
            and ``client.checkpoint()`` writes there by default.
        lease_timeout: seconds after which an idle writer's rows may pass on.
        local_writes: writers on a shard's node send their chunks to it over a
            Unix-domain socket instead of Ray calls (one socket per writer;
            :mod:`recollect.ray.channel`). A Ray call costs about 0.8 ms
            of CPU per side whatever it carries; measured with 8 writer
            processes on 2 cores, inserts of W2 steps over 1 shard go from
            0.46-0.55M steps/s as Ray calls to 1.8-2.0M over sockets. Writers
            on other nodes use Ray calls either way.
        max_restarts: times Ray restarts a dead shard actor (from the last checkpoint).
        detached: keep the actors alive after this driver exits (stop them with
            ``client.close()`` from any process, or ``ray.kill``).
        rng: seed of the client's split of batches over shards.

    Returns:
        A :class:`~recollect.service.Client`; its ``close()`` stops the actors.

    Raises:
        InvalidArgumentError: bad tables or arguments, a non-empty buffer, or a
            name already in use.
        StateError: Ray is not initialized in this process.
        CheckpointError: a shard's checkpoint in ``checkpoint_dir`` is damaged
            (the message names the table, the shard and the file); no actor is
            left running.
    """
    tables = check_tables(tables)
    if max_restarts < 0 and max_restarts != -1:
        raise InvalidArgumentError(f"`max_restarts` must be >= 0 or -1; got {max_restarts!r}.")
    for table, buf in tables.items():
        if len(buf):
            raise InvalidArgumentError(
                f"table {table!r} holds {len(buf)} steps; serve() builds its shards empty from "
                "the buffer's configuration. Checkpoint the data (client.checkpoint) and start "
                "with checkpoint_dir=... to serve stored steps."
            )
    shards = _shard_counts(num_shards, tables)
    configs = {
        table: [shard_config(buf.config(), shards[table], k, table) for k in range(shards[table])]
        for table, buf in tables.items()
    }
    _require_ray()
    name = name or f"service-{uuid.uuid4().hex[:8]}"
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        pass
    else:
        raise InvalidArgumentError(
            f"a recollect service named {name!r} already runs in this Ray cluster; connect to "
            "it with recollect.ray.connect(name) or pick another name."
        )
    directory = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
    lifetime = "detached" if detached else None
    actors: list[Any] = []
    endpoints: dict[str, list[RayEndpoint]] = {}
    for table, shard_configs in configs.items():
        endpoints[table] = []
        for k, config in enumerate(shard_configs):
            actor = _ShardActor.options(
                name=f"{name}/{table}/{k}",
                namespace=NAMESPACE,
                num_cpus=0,
                max_concurrency=SHARD_THREADS,
                max_restarts=max_restarts,
                lifetime=lifetime,
                scheduling_strategy=_strategy(placement, k),
            ).remote(table, config, directory, lease_timeout, local_writes)
            actors.append(actor)
            endpoints[table].append(RayEndpoint(table, k, actor))
    directory_actor = _Directory.options(
        name=name, namespace=NAMESPACE, num_cpus=0, lifetime=lifetime
    ).remote({t: len(e) for t, e in endpoints.items()}, directory)
    actors.append(directory_actor)
    ray.get([a.__ray_ready__.remote() for a in actors])

    def stop() -> None:
        for actor in actors:
            ray.kill(actor, no_restart=True)

    failed = [e for e in ray.get([a.failed_restore.remote() for a in actors[:-1]]) if e]
    if failed:  # a damaged checkpoint: recollect's own error, naming the shard and the file
        stop()
        raise failed[0]

    return Client(endpoints, name=name, checkpoint_dir=directory, rng=rng, on_close=stop)


def connect(name: str, *, rng: Any = None) -> Client:
    """A client of the service ``name`` started by :func:`serve` (from any process of the
    cluster; its ``close()`` leaves the service running).

    Raises:
        InvalidArgumentError: no service of that name runs in this Ray cluster.
    """
    _require_ray()
    try:
        directory = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError as err:
        raise InvalidArgumentError(
            f"no recollect service named {name!r} runs in this Ray cluster (is this process "
            "connected to the right cluster? ray.init(address=...))."
        ) from err
    layout = cast(dict[str, Any], ray.get(directory.layout.remote()))
    endpoints = {
        table: [
            RayEndpoint(table, k, ray.get_actor(f"{name}/{table}/{k}", namespace=NAMESPACE))
            for k in range(n)
        ]
        for table, n in layout["tables"].items()
    }
    return Client(endpoints, name=name, checkpoint_dir=layout["checkpoint_dir"], rng=rng)


def shard_locations(client: Client, table: str) -> list[dict[str, Any]]:
    """``[{"node_id", "pid"}]`` of each shard actor of ``table`` (where Ray placed them)."""
    endpoints = cast(list[RayEndpoint], client.endpoints(table))
    locations: list[dict[str, Any]] = ray.get([e.actor.where.remote() for e in endpoints])
    return locations
