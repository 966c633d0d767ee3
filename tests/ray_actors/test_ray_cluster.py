"""A table's shards on two nodes of a (simulated, loopback-only) Ray cluster."""

from __future__ import annotations

import os

import numpy as np
import pytest

import recollect as rc

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
rc_ray = pytest.importorskip("recollect.ray")
from recollect.ray.actor import ChunkCall  # noqa: E402
from recollect.service.wire import requests as rq  # noqa: E402

SPEC = {"obs": rc.ArraySpec((3,), np.float32)}


@pytest.fixture(scope="module")
def cluster():
    """Two nodes on 127.0.0.1 (the module's one Ray session)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if ray.is_initialized():
        ray.shutdown()
    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
    ray.init(
        address=cluster.address,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
    )
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow  # about 9 s (a two-node Ray cluster): runs with CI=true / --run-slow
def test_spread_shards_land_on_different_nodes_and_sample_as_one_table(cluster) -> None:
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    client = rc_ray.serve(
        {"t": rc.ReplayBuffer(SPEC, 4 * 16, 4)}, num_shards=2, name="two", placement="spread"
    )
    try:
        where = rc_ray.shard_locations(client, "t")
        assert len({w["node_id"] for w in where}) == 2
        for value in (1.0, 2.0):
            with client.writer("t", 2) as writer:
                for _ in range(int(value) * 4):
                    writer.add_batch({"obs": np.full((2, 3), value, np.float32)})
        # a writer on a shard's node sends chunks over its socket; to the other node, Ray calls
        here = ray.get_runtime_context().get_node_id()
        for writer in [client.writer("t", 1) for _ in range(2)]:
            endpoint = client.endpoints("t")[writer.shard]
            empty = [np.ones((1, 0, 3), np.float32)]  # a chunk of no steps
            handle = endpoint.send(rq.Extend(writer.lease_id, empty, None))
            assert (type(handle) is ChunkCall) is (where[writer.shard]["node_id"] == here)
            assert endpoint.result(handle) == 0
            writer.close()
        sample = client.sample("t", 4000)
        assert sample.table_size == 2 * 4 + 2 * 8
        share = float(np.mean(sample.data["obs"][:, 0] == 2.0))
        assert abs(share - 16 / 24) < 0.05  # in proportion to each node's steps
        assert set(rc.ids.decode(sample.ids)[0].tolist()) == {0, 1}
    finally:
        client.close()
