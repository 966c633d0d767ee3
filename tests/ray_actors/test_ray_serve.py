"""The replay service on Ray: shards in actors, exact sampling over them, faults.

One loopback-only Ray session serves the whole module (``ray_session``).
"""

from __future__ import annotations

import os
import pickle
import threading
import time

import numpy as np
import pytest

import recollect as rc
from chi_square import assert_fits
from recollect.errors import (
    DTypeError,
    InvalidArgumentError,
    RateLimiterTimeout,
    ShardUnavailableError,
    StateError,
)
from recollect.ids import decode

ray = pytest.importorskip("ray")
rc_ray = pytest.importorskip("recollect.ray")
from recollect.ray.actor import ChunkCall  # noqa: E402
from recollect.service.wire import requests as rq  # noqa: E402

SPEC = {
    "obs": rc.ArraySpec((3,), np.float32),
    "writer": rc.ArraySpec((), np.int64),
    "seq": rc.ArraySpec((), np.int64),
    "is_last": rc.ArraySpec((), bool),
}


@pytest.fixture(scope="module", autouse=True)
def _ray(ray_session):
    return ray_session


def step(writer: int, seq: int, num_envs: int, is_last: bool = False) -> dict:
    return {
        "obs": np.full((num_envs, 3), seq, np.float32),
        "writer": np.full(num_envs, writer),
        "seq": np.full(num_envs, seq),
        "is_last": np.full(num_envs, is_last),
    }


@ray.remote(num_cpus=0)
class WriterProcess:
    """A writer in its own process, connected to the service by name."""

    def __init__(self, name: str, table: str, num_envs: int, writer_id: int) -> None:
        self.client = rc_ray.connect(name)
        self.writer = self.client.writer(table, num_envs, chunk_length=4)
        self.id = writer_id
        self.seq = 0

    def rows(self) -> tuple[int, list[int]]:
        return self.writer.shard, self.writer.rows.tolist()

    def write(self, count: int, flush: bool) -> int:
        for _ in range(count):
            self.writer.add_batch(step(self.id, self.seq, self.writer.num_envs))
            self.seq += 1
        if flush:
            self.writer.flush()
        return self.seq


def test_four_shards_sample_exactly_like_one_buffer() -> None:
    buf = rc.ReplayBuffer(SPEC, 8 * 64, 8)
    client = rc_ray.serve({"t": buf}, num_shards=4, name="exact", rng=0)
    try:
        writers = [client.writer("t", 2, chunk_length=5) for _ in range(4)]
        assert sorted(w.shard for w in writers) == [0, 1, 2, 3]
        for k, w in enumerate(writers):
            for s in range((3, 9, 20, 40)[k]):
                w.add_batch(step(k, s, 2))
            w.flush()
        total = 2 * (3 + 9 + 20 + 40)

        def draw() -> np.ndarray:
            ids = []
            for _ in range(40):
                sample = client.sample("t", 256)
                assert sample.table_size == total
                np.testing.assert_allclose(sample.probabilities, 1 / total)
                ids.append(sample.ids)
            _, counts = np.unique(np.concatenate(ids), return_counts=True)
            assert len(counts) == total
            return counts

        assert_fits(draw)
        info = client.info("t")
        assert info.num_stored == total and len(info.shards) == 4 and info.leased_rows == 8
        # another process connects by name and writes to its own rows
        other = WriterProcess.remote("exact", "t", 1, 9)
        with pytest.raises(ray.exceptions.RayError, match="free row"):
            ray.get(other.rows.remote())
    finally:
        client.close()


def test_prioritized_weights_come_from_global_probabilities() -> None:
    sampler = rc.Prioritized(
        priority_exponent=0.6, importance_sampling_exponent=0.4, weight_normalization="batch"
    )
    buf = rc.ReplayBuffer(SPEC, 4 * 32, 4, sampler=sampler, sequence_length=1)
    client = rc_ray.serve({"t": buf}, num_shards=2, name="per", rng=0)
    try:
        for k in range(2):
            with client.writer("t", 2) as w:
                for s in range(10 * (k + 1)):
                    w.add_batch(step(k, s, 2))
        sample = client.sample("t", 64)
        client.update_priorities("t", sample.ids, np.linspace(0.1, 5, 64))
        sample = client.sample("t", 256)
        n = client.info("t").size
        assert sample.table_size == n == 60
        w = (n * sample.probabilities) ** -0.4
        np.testing.assert_allclose(sample.weights, w / w.max())
        assert client.update_priorities("t", sample.ids, np.ones(256), wait=True) == 0
    finally:
        client.close()


@pytest.mark.parametrize("local_writes", [True, False], ids=["socket", "ray-calls"])
def test_bad_input_over_ray_fails_as_on_a_local_buffer(local_writes: bool) -> None:
    sampler = rc.Prioritized()
    local = rc.ReplayBuffer(SPEC, 16, 2, sampler=rc.Prioritized(), sequence_length=1)
    client = rc_ray.serve(
        {"t": rc.ReplayBuffer(SPEC, 16, 2, sampler=sampler, sequence_length=1)},
        name=f"bad-{local_writes}",
        local_writes=local_writes,
    )
    try:
        writer = client.writer("t", 2)
        bad = {**step(0, 0, 2), "seq": np.zeros(2, np.float64) + 0.5}
        for call_local, call_served in [
            (lambda: local.add_batch(bad), lambda: writer.add_batch(bad)),
            (lambda: local.sample(2), lambda: client.sample("t", 2)),
        ]:
            with pytest.raises(Exception) as want:
                call_local()
            with pytest.raises(Exception) as got:
                call_served()
            assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
        local.add_batch(step(0, 0, 2))
        writer.add_batch(step(0, 0, 2))
        writer.flush()
        ids = client.sample("t", 2).ids
        endpoint = client.endpoints("t")[0]
        # a chunk as a writer sends it (flat leaves, the spec's order), with seq not cast
        block = [np.asarray(v)[:, None] for _, v in sorted(bad.items())]
        for call_local, call_served in [
            (lambda: local.sample(0), lambda: client.sample("t", 0)),
            (
                lambda: local.update_priorities(ids, [np.nan, 1]),
                lambda: client.update_priorities("t", ids, [np.nan, 1], wait=True),
            ),
        ]:
            with pytest.raises(Exception) as want:
                call_local()
            with pytest.raises(Exception) as got:
                call_served()
            assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
        # a writer's chunks go over the shard's socket on its node, unless told otherwise
        handle = endpoint.send(rq.Extend(writer.lease_id, block, None))
        assert (type(handle) is ChunkCall) is local_writes
        with pytest.raises(DTypeError, match=r"chunk leaf 'seq' must have dtype int64 \(the shard"):
            endpoint.result(handle)
        copy = pickle.loads(pickle.dumps(endpoint))  # its sockets stay in this process
        assert copy.result(copy.send(rq.Info())).num_stored == 2
        assert client.info("t").num_stored == 2
    finally:
        client.close()


def test_a_blocked_sample_waits_on_the_shard_without_blocking_other_calls() -> None:
    buf = rc.ReplayBuffer(SPEC, 16, 2, rate_limiter=rc.MinSize(4))
    client = rc_ray.serve({"t": buf}, name="limits")
    try:
        with pytest.raises(RateLimiterTimeout):
            client.sample("t", 1, timeout=0.1)
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(client.sample("t", 2, timeout=20)))
        waiter.start()
        time.sleep(0.2)
        start = time.monotonic()
        assert client.info("t").num_stored == 0
        assert time.monotonic() - start < 2.0
        with client.writer("t", 2, chunk_length=2) as w:
            w.add_batch(step(0, 0, 2))
            w.add_batch(step(0, 1, 2))
        waiter.join(20)
        assert len(got) == 1 and len(got[0].ids) == 2
    finally:
        client.close()


@pytest.mark.slow  # about 8 s (writer processes killed): runs with CI=true / --run-slow
@pytest.mark.parametrize("local_writes", [True, False], ids=["socket", "ray-calls"])
def test_a_killed_writer_process_keeps_what_it_flushed_and_frees_its_rows(
    local_writes: bool,
) -> None:
    buf = rc.ReplayBuffer(SPEC, 2 * 64, 2, sequence_length=2)
    name = f"writers-{local_writes}"
    client = rc_ray.serve({"t": buf}, name=name, rng=0, local_writes=local_writes)
    try:
        first = WriterProcess.remote(name, "t", 2, 1)
        assert ray.get(first.rows.remote()) == (0, [0, 1])
        assert ray.get(first.write.remote(6, True)) == 6  # flushed: 6 steps per row
        ray.get(first.write.remote(5, False))  # one chunk of 4 in flight, 1 step pending
        ray.kill(first)
        deadline = time.monotonic() + 15
        while True:  # the shard sees the process gone once it exited
            try:
                second = WriterProcess.remote(name, "t", 2, 2)
                assert ray.get(second.rows.remote()) == (0, [0, 1])
                break
            except ray.exceptions.RayError:
                assert time.monotonic() < deadline, "the dead writer's rows never passed on"
                time.sleep(0.2)
        info = client.info("t")
        # the 6 flushed steps; the chunk in flight arrived whole or not at all; never the pending
        assert info.num_stored in (2 * 6, 2 * 10)
        ray.get(second.write.remote(4, True))
        sample = client.sample("t", 2000)
        writer, seq = sample.data["writer"], sample.data["seq"]
        assert np.all(writer[:, 0] == writer[:, 1])  # no window spans the two writers
        assert set(np.unique(writer).tolist()) == {1, 2}
        np.testing.assert_array_equal(np.diff(seq, axis=1), 1)
        ray.kill(second)
    finally:
        client.close()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_shard_raises_shard_unavailable_within_5_seconds() -> None:
    buf = rc.ReplayBuffer(SPEC, 8 * 16, 8)
    client = rc_ray.serve({"t": buf}, num_shards=2, name="killed")
    try:
        writers = [client.writer("t", 4, chunk_length=1) for _ in range(2)]
        for w in writers:
            w.add_batch(step(0, 0, 4))
            w.flush()
        pid = rc_ray.shard_locations(client, "t")[1]["pid"]
        ray.kill(client.endpoints("t")[1].actor, no_restart=True)
        start = time.monotonic()
        with pytest.raises(ShardUnavailableError, match="table 't' shard 1"):
            for _ in range(100):
                client.sample("t", 8)
                client.info("t")
        assert time.monotonic() - start < 5.0
        while process_alive(pid):  # ray.kill returns before the process is gone
            assert time.monotonic() - start < 5.0
            time.sleep(0.01)
        start = time.monotonic()
        on_killed = next(w for w in writers if w.shard == 1)
        with pytest.raises(ShardUnavailableError, match="table 't' shard 1"):
            on_killed.add_batch(step(0, 1, 4))  # its socket died with the shard
            on_killed.flush()
        assert time.monotonic() - start < 5.0
    finally:
        client.close()


@pytest.mark.slow  # about 4.5 s (a shard actor killed and restarted): CI=true / --run-slow
def test_a_restarted_shard_comes_back_from_its_checkpoint(tmp_path) -> None:
    buf = rc.ReplayBuffer(SPEC, 4 * 16, 4, sampler=rc.Prioritized(), sequence_length=1)
    client = rc_ray.serve(
        {"t": buf}, num_shards=2, name="restarts", checkpoint_dir=tmp_path, max_restarts=1
    )
    try:
        writers = [client.writer("t", 2, chunk_length=1) for _ in range(2)]
        for s in range(5):
            for k, w in enumerate(writers):
                w.add_batch(step(k, s, 2))
        for w in writers:
            w.flush()
        client.checkpoint()
        for w in writers:
            w.add_batch(step(9, 9, 2))
            w.flush()
        assert client.info("t").num_stored == 24
        ray.kill(client.endpoints("t")[0].actor, no_restart=False)
        deadline = time.monotonic() + 60
        while True:  # until the restarted shard answers (it holds no lease yet)
            try:
                info = client.info("t")
                if info.shards[0].leased_rows == 0:
                    break
            except ShardUnavailableError:
                pass
            assert time.monotonic() < deadline, "the shard did not come back"
            time.sleep(0.2)
        assert info.lost_steps == 2 and info.shards[0].lost_steps == 2
        assert info.num_stored == 22
        sample = client.sample("t", 64)
        assert len(sample.ids) == 64
        lost = next(w for w in writers if w.shard == 0)
        with pytest.raises(StateError, match="not held"):  # its lease died with the shard
            lost.add_batch(step(0, 10, 2))
            lost.flush()
        with client.writer("t", 2) as again:
            again.add_batch(step(0, 10, 2))
        assert client.info("t").num_stored == 24
    finally:
        client.close()


def test_serve_refuses_what_it_cannot_serve() -> None:
    full = rc.ReplayBuffer(SPEC, 8, 2)
    full.add_batch(step(0, 0, 2))
    with pytest.raises(InvalidArgumentError, match="builds its shards empty"):
        rc_ray.serve({"t": full})
    with pytest.raises(InvalidArgumentError, match="multiple of num_shards"):
        rc_ray.serve({"t": rc.ReplayBuffer(SPEC, 6, 3)}, num_shards=2)
    with pytest.raises(InvalidArgumentError, match="no recollect service named"):
        rc_ray.connect("nobody")
    client = rc_ray.serve({"t": rc.ReplayBuffer(SPEC, 8, 2)}, name="twice")
    try:
        with pytest.raises(InvalidArgumentError, match="already runs"):
            rc_ray.serve({"t": rc.ReplayBuffer(SPEC, 8, 2)}, name="twice")
    finally:
        client.close()


def test_datasets_read_a_table_sharded_on_ray() -> None:
    torch = pytest.importorskip("torch")
    from recollect.adapters.torch import ReplayDataset

    buf = rc.ReplayBuffer(SPEC, 4 * 32, 4, sampler=rc.Prioritized(), sequence_length=2)
    client = rc_ray.serve({"t": buf}, num_shards=2, name="datasets")
    try:
        for k in range(2):
            with client.writer("t", 2) as w:
                for s in range(10):
                    w.add_batch(step(k, s, 2))
        handle = client.table("t")
        dataset = ReplayDataset(handle, batch_size=32, max_in_flight=3)
        shards = set()
        for (data, info), _ in zip(dataset, range(8), strict=False):
            assert data["seq"].shape == (32, 2) and data["seq"].dtype == torch.int64
            np.testing.assert_array_equal(np.diff(data["seq"].numpy(), axis=1), 1)
            np.testing.assert_array_equal(data["writer"][:, 0], data["writer"][:, 1])
            shards.update(decode(info.ids.numpy())[0].tolist())
            handle.update_priorities(info.ids.numpy(), np.full(32, 2.0))
        assert len(shards) == 2  # one dataset, batches drawn over both shards
        dataset.close()
    finally:
        client.close()
