"""The typed shard seam: every shard method is a typed request and an endpoint method, no
method is called by name, and the shard (not a transport) stores a lease's chunks in order."""

from __future__ import annotations

import ast
import concurrent.futures
import inspect
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

import recollect as rc
from recollect.errors import StateError
from recollect.service.client.writer import Writer
from recollect.service.shard import Shard
from recollect.service.wire import codec
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint, LocalEndpoint
from recollect.service.wire.protocol import ShardProtocol

SRC = Path(__file__).resolve().parents[3] / "src" / "recollect"
SPEC = {"seq": rc.ArraySpec((), np.int64)}
ENVS, CHUNK = 2, 4


def shard_methods() -> set[str]:
    return {
        name
        for name, value in vars(ShardProtocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }


def chunk(k: int) -> list[np.ndarray]:
    """Chunk ``k`` as a writer sends it: the spec's flat leaves (its one leaf "seq")."""
    return [np.broadcast_to(np.arange(k * CHUNK, (k + 1) * CHUNK), (ENVS, CHUNK)).copy()]


def test_every_shard_method_is_a_request_and_a_shard_method_and_nothing_else() -> None:
    methods = shard_methods()
    assert {"reserve", "extend", "release", "sample_batches", "update_priorities"} <= methods
    for name in methods:
        assert callable(getattr(Shard, name)), name
    # an endpoint delivers requests; it restates no shard operation
    endpoint_methods = {n for n in vars(Endpoint) if not n.startswith("_")}
    assert endpoint_methods & methods == set(), endpoint_methods & methods
    assert {"send", "result"} <= endpoint_methods
    applied = set()
    for request in vars(rq).values():
        if (
            inspect.isclass(request)
            and issubclass(request, rq.Request)
            and request is not rq.Request
        ):
            applied |= set(re.findall(r"shard\.(\w+)\(", inspect.getsource(request.apply)))
    assert applied == methods


def test_no_shard_method_is_called_by_name() -> None:
    by_name = re.compile(r"getattr\(self\.shard|\.submit\(\s*['\"]|\.call\.remote\(\s*['\"]")
    offenders = [
        f"{path.relative_to(SRC)}:{number}"
        for folder in ("service", "ray")
        for path in sorted((SRC / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if by_name.search(line)
    ]
    assert offenders == []


def test_requests_survive_the_wire_and_call_the_shard() -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 64, ENVS))
    lease, rows = codec.unpack(codec.packed(rq.Reserve(ENVS, "host", os.getpid()))).apply(shard)
    assert list(rows) == [0, 1]
    request = codec.unpack(codec.packed(rq.Extend(lease, chunk(0), None, 0)))
    assert request.stream == lease and request.stream_lost() == rq.CheckLease(lease)
    assert request.apply(shard) == ENVS * CHUNK
    assert rq.Release(lease).ends_stream == lease
    assert rq.Info().apply(shard).num_stored == ENVS * CHUNK


@pytest.mark.parametrize("arrival", [[3, 1, 0, 5, 2, 4], [5, 4, 3, 2, 1, 0]])
def test_the_shard_stores_numbered_chunks_in_their_order_whatever_the_arrival(
    arrival: list[int],
) -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 400, ENVS))
    lease, rows = shard.reserve(ENVS, "host", os.getpid())
    with concurrent.futures.ThreadPoolExecutor(len(arrival)) as pool:
        futures = []
        for k in arrival:
            futures.append(pool.submit(shard.extend, lease, chunk(k), None, k))
            time.sleep(0.01)
        assert [f.result(10) for f in futures] == [ENVS * CHUNK] * len(arrival)
    for row in rows:
        stored = shard.buffer.reader.gather_row(int(row))["seq"]
        np.testing.assert_array_equal(stored, np.arange(len(arrival) * CHUNK))


def test_a_chunk_waiting_for_its_turn_fails_when_the_lease_is_released() -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 400, ENVS))
    lease, _ = shard.reserve(ENVS, "host", os.getpid())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(shard.extend, lease, chunk(1), None, 1)
        time.sleep(0.05)
        assert not waiting.done()
        shard.release(lease)
        with pytest.raises(StateError, match=r"lease \d+ is not held"):
            waiting.result(10)


def test_a_chunk_whose_predecessor_never_comes_fails_after_the_turn_timeout() -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 400, ENVS), lease_timeout=0.2)
    lease, _ = shard.reserve(ENVS, "host", os.getpid())
    with pytest.raises(StateError, match=r"chunk 2 of writer lease \d+ waited 1 s for chunk 0"):
        shard.extend(lease, chunk(2), None, 2)
    assert shard.extend(lease, chunk(0), None, 0) == ENVS * CHUNK  # still in turn


class Recording(LocalEndpoint):
    def __init__(self, shard: Shard) -> None:
        super().__init__(shard)
        self.sent: list[rq.Request] = []

    def send(self, request: rq.Request):
        self.sent.append(request)
        return super().send(request)


def test_a_writer_numbers_its_chunks_from_zero() -> None:
    endpoint = Recording(Shard("t", rc.ReplayBuffer(SPEC, 400, ENVS)))
    writer = Writer(endpoint, SPEC, ENVS, chunk_length=CHUNK)
    for t in range(3 * CHUNK):
        writer.add_batch({"seq": np.full(ENVS, t)})
    writer.close()
    kinds = [type(r).__name__ for r in endpoint.sent]
    assert kinds == ["Reserve", "Extend", "Extend", "Extend", "Release"]
    assert [r.seq for r in endpoint.sent if isinstance(r, rq.Extend)] == [0, 1, 2]


#: each side of the service imports the wire layer and never the other side
FORBIDDEN = {
    "client": ("recollect.service.shard", "recollect.service.server"),
    "shard": ("recollect.service.client", "recollect.service.server"),
    "wire": ("recollect.service.client", "recollect.service.shard", "recollect.service.server"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    } | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}


@pytest.mark.parametrize("side", sorted(FORBIDDEN))
def test_each_side_imports_the_wire_layer_and_not_the_other_side(side: str) -> None:
    modules = sorted((SRC / "service" / side).glob("*.py"))
    assert len(modules) >= 3, modules
    offenders = {
        f"{path.name}: {name}"
        for path in modules
        for name in _imports(path)
        if name.startswith(FORBIDDEN[side])
    }
    assert offenders == set()


def test_the_socket_transport_lives_beside_its_only_user() -> None:
    assert not list((SRC / "service").rglob("channel*.py"))
    assert not list((SRC / "service").rglob("listener.py"))
    users = {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if "recollect.ray.channel" in path.read_text(encoding="utf-8") and path.parent.name != "ray"
    }
    assert users == set()
