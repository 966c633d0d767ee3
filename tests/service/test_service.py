"""The in-process replay service: writers, exact sampling over shards, leases, limits, state."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import recollect as rc
from chi_square import assert_fits
from recollect.errors import (
    InvalidArgumentError,
    NotEnoughDataError,
    RateLimiterTimeout,
    ShapeError,
    StateError,
)
from recollect.service import Server
from recollect.specs import FlatSpec

SPEC = {"obs": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}


def steps(value: float, num_envs: int, is_last: bool = False) -> dict:
    return {
        "obs": np.full((num_envs, 3), value, np.float32),
        "is_last": np.full(num_envs, is_last),
    }


def test_writer_stores_what_a_local_add_batch_stores() -> None:
    reference = rc.ReplayBuffer(SPEC, 400, 4)
    served = rc.ReplayBuffer(SPEC, 400, 4)
    client = Server({"t": served}).client()
    rng = np.random.default_rng(0)
    with client.writer("t", 4, chunk_length=7) as writer:
        for i in range(30):
            step = {
                "obs": rng.normal(size=(4, 3)).astype(np.float32),
                "is_last": rng.random(4) < 0.2,
            }
            reference.add_batch(step)
            writer.add_batch(step)
            if i == 10:
                assert len(served) == 4 * 7  # one chunk sent, the rest pending
    assert writer.rows.tolist() == [0, 1, 2, 3]
    assert len(served) == len(reference) == 120
    for row in range(4):
        got, want = served.reader.gather_row(row), reference.reader.gather_row(row)
        np.testing.assert_array_equal(got["obs"], want["obs"])
        np.testing.assert_array_equal(got["is_last"], want["is_last"])


def test_add_of_a_single_env_writer_and_its_refusal_with_several() -> None:
    buf = rc.ReplayBuffer(SPEC, 40, 2)
    client = Server({"t": buf}).client()
    one = client.writer("t", 1, chunk_length=2)
    one.add({"obs": np.ones(3, np.float32), "is_last": False})
    one.add({"obs": np.ones(3, np.float32), "is_last": True})
    assert buf.reader.steps_per_row().tolist() == [2, 0]
    two = client.writer("t", 1)
    assert two.rows.tolist() == [1]
    with pytest.raises(InvalidArgumentError, match="free row"):
        client.writer("t", 1)
    one.close()
    client.writer("t", 1)  # the released row passes on
    two.close()


def test_a_sent_chunk_is_the_shards_own_copy_unchanged_by_later_steps() -> None:
    """The writer refills one time-major buffer: each chunk it sends is a new row-major
    copy ``[num_envs, steps, ...]``, which later steps and the caller's arrays leave alone."""
    from recollect.service.wire.endpoint import LocalEndpoint

    client = Server({"t": rc.ReplayBuffer(SPEC, 400, 2)}).client()
    writer = client.writer("t", 2, chunk_length=3)
    kept: list = []

    class Keeping(LocalEndpoint):  # keeps each chunk's leaves as a transport might
        def send(self, request):
            kept.append(getattr(request, "leaves", None))
            return super().send(request)

    writer._endpoint = Keeping(writer._endpoint.shard_object)
    step = steps(0.0, 2)
    for i in range(7):
        step["obs"][:] = i  # the caller reuses its arrays
        writer.add_batch(step)
    writer.flush()
    at = list(FlatSpec(SPEC).paths).index("obs")
    obs = [leaves[at] for leaves in kept if leaves is not None]
    assert [o.shape for o in obs] == [(2, 3, 3), (2, 3, 3), (2, 1, 3)]
    assert all(o.flags.c_contiguous for o in obs)
    for k, o in enumerate(obs):
        want = np.arange(3 * k, min(3 * k + 3, 7), dtype=np.float32)
        np.testing.assert_array_equal(o, np.broadcast_to(want[None, :, None], o.shape))
    writer.close()


def _error(call) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "bad",
    [
        {"obs": np.zeros((2, 3), np.float32), "is_last": np.zeros(4, bool)},
        {"obs": np.zeros((4, 3), np.float64) + 1e300, "is_last": np.zeros(4, bool)},
        {"obs": np.zeros((4, 3), np.int64), "is_last": np.zeros(4, np.float32)},
        {"obs": np.zeros((4, 3), np.float32)},
        {"obs": np.zeros((4, 3), np.float32), "is_last": np.zeros(4, bool), "extra": 1},
    ],
)
def test_bad_steps_fail_as_on_a_local_buffer_and_change_nothing(bad: dict) -> None:
    local = rc.ReplayBuffer(SPEC, 40, 4)
    served = rc.ReplayBuffer(SPEC, 40, 4)
    client = Server({"t": served}).client()
    writer = client.writer("t", 4, chunk_length=4)
    writer.add_batch(steps(1.0, 4))
    want = _error(lambda: local.add_batch(bad))
    got = _error(lambda: writer.add_batch(bad))
    # the same message, naming the writer where the writer's num_envs is meant
    as_local = (
        str(got)
        .replace("the writer's num_envs", "the buffer's num_envs")
        .replace("open the writer with", "create the buffer with")
    )
    assert type(got) is type(want) and as_local == str(want)
    assert writer.pending == 1
    writer.flush()
    assert len(served) == 4


def test_bad_requests_fail_as_on_a_local_buffer_and_change_nothing() -> None:
    local = rc.ReplayBuffer(SPEC, 40, 2, sampler=rc.Prioritized(), sequence_length=1)
    served = rc.ReplayBuffer(SPEC, 40, 2, sampler=rc.Prioritized(), sequence_length=1)
    client = Server({"t": served}).client()
    want = _error(lambda: local.sample(4))
    got = _error(lambda: client.sample("t", 4))
    assert type(got) is NotEnoughDataError and str(got) == str(want)
    for buf in (local, served):
        buf.add_batch(steps(1.0, 2))
    ids = client.sample("t", 2).ids
    state = served.state_dict()["table"]["sampler"]["values"].copy()
    for call_local, call_served in [
        (lambda: local.sample(0), lambda: client.sample("t", 0)),
        (lambda: local.sample(2, num_steps=3), lambda: client.sample("t", 2, num_steps=3)),
        (
            lambda: local.update_priorities(ids, [np.nan, 1.0]),
            lambda: client.update_priorities("t", ids, [np.nan, 1.0], wait=True),
        ),
        (
            lambda: local.update_priorities(ids, [-1.0, 1.0]),
            lambda: client.update_priorities("t", ids, [-1.0, 1.0], wait=True),
        ),
    ]:
        want, got = _error(call_local), _error(call_served)
        assert type(got) is type(want) and str(got) == str(want)
    np.testing.assert_array_equal(served.state_dict()["table"]["sampler"]["values"], state)
    # an update held back is checked by its own call (issue 23: not by the next sample)
    with pytest.raises(InvalidArgumentError, match="got inf at position 0"):
        client.update_priorities("t", ids, [np.inf, 1.0])
    client.sample("t", 2)
    with pytest.raises(InvalidArgumentError, match="no table named 'x'"):
        client.sample("x", 2)


def _fill_unevenly(client: rc.service.Client, table: str, rng: np.random.Generator) -> None:
    """Writers on 4 shards write 3, 9, 20 and 40 steps per row: shards of unequal size."""
    for count in (3, 9, 20, 40):
        with client.writer(table, 2, chunk_length=5) as writer:
            for _ in range(count):
                writer.add_batch(
                    {
                        "obs": rng.normal(size=(2, 3)).astype(np.float32),
                        "is_last": rng.random(2) < 0.1,
                    }
                )


def _counts(ids: np.ndarray, universe: np.ndarray) -> np.ndarray:
    index = {int(i): k for k, i in enumerate(universe)}
    return np.bincount([index[int(i)] for i in ids], minlength=len(universe))


def _all_ids(server: Server, table: str) -> np.ndarray:
    out = []
    for shard in server.shards[table]:
        buf = shard.buffer
        for row in range(buf.num_envs):
            lo, hi = buf.table.index.lo[row], buf.table.index.hi[row]
            out.append(rc.ids.encode(np.full(hi - lo, row), np.arange(lo, hi), shard.index))
    return np.concatenate(out)


def _stored_leaf(server: Server, leaf: str):
    """``stored(ids)``: the ``leaf`` of the steps ``ids`` name, read from the shards."""
    rows = {}
    for shard in server.shards["t"]:
        buf = shard.buffer
        for row in range(buf.num_envs):
            rows[shard.index, row] = (buf.table.index.lo[row], buf.reader.gather_row(row)[leaf])

    def stored(ids: np.ndarray) -> np.ndarray:
        shards, row_of, times = rc.ids.decode(ids)
        out = []
        for s, r, t in zip(shards.tolist(), row_of.tolist(), times.tolist(), strict=True):
            lo, values = rows[s, r]
            out.append(values[t - lo])
        return np.stack(out)

    return stored


def _batches(client: rc.service.Client, per_request: int, total: int = 100, **kwargs) -> list:
    """``total`` batches of 256 from table "t", ``per_request`` per request."""
    if per_request == 1:
        return [client.sample("t", 256, **kwargs) for _ in range(total)]
    out = []
    for _ in range(total // per_request):
        batches = client.sample_batches("t", 256, per_request, **kwargs)
        assert len(batches) == per_request
        out += batches
    return out


# per_request 8: one request per shard for 8 batches; a rate limiter draws them one by one
@pytest.mark.parametrize("per_request,limiter", [(1, None), (8, None), (8, rc.MinSize(1))])
def test_uniform_sampling_over_four_shards_is_uniform_over_all_steps(
    per_request: int, limiter
) -> None:
    spec = {"obs": rc.ArraySpec((3,), np.float32), "is_last": rc.ArraySpec((), bool)}
    server = Server({"t": rc.ReplayBuffer(spec, 8 * 64, 8, rate_limiter=limiter)}, num_shards=4)
    client = server.client(rng=0)
    _fill_unevenly(client, "t", np.random.default_rng(1))
    universe = _all_ids(server, "t")
    assert len(universe) == 2 * (3 + 9 + 20 + 40)
    stored = _stored_leaf(server, "obs")

    def draw() -> np.ndarray:
        ids = []
        for sample in _batches(client, per_request):
            assert sample.table_size == len(universe) and sample.ids.shape == (256,)
            assert sample.data["obs"].shape == (256, 3)
            # each window holds the step its id names (the shards' parts were put in order)
            np.testing.assert_array_equal(sample.data["obs"], stored(sample.ids))
            np.testing.assert_allclose(sample.probabilities, 1 / len(universe))
            ids.append(sample.ids)
        return _counts(np.concatenate(ids), universe)

    assert_fits(draw)
    # windows of 3 within episodes: the same over every valid window of every shard
    sample = client.sample("t", 64, num_steps=3)
    local_sizes = sum(s.buffer.table.sampling_weight(3)[1] for s in server.shards["t"])
    assert sample.table_size == local_sizes
    assert sample.data["obs"].shape == (64, 3, 3)
    assert not sample.data["is_last"][:, :-1].any()


@pytest.mark.parametrize("per_request,limiter", [(1, None), (8, None), (8, rc.MinSize(1))])
def test_prioritized_sampling_over_four_shards_follows_the_global_priorities(
    per_request: int, limiter
) -> None:
    alpha, beta, eps = 0.6, 0.4, 1e-3
    sampler = rc.Prioritized(
        priority_exponent=alpha, importance_sampling_exponent=beta, epsilon=eps
    )
    buf = rc.ReplayBuffer(SPEC, 8 * 64, 8, sampler=sampler, sequence_length=1, rate_limiter=limiter)
    server = Server({"t": buf}, num_shards=4)
    client = server.client(rng=0)
    _fill_unevenly(client, "t", np.random.default_rng(2))
    universe = _all_ids(server, "t")
    priorities = np.random.default_rng(3).uniform(0.0, 4.0, len(universe))
    assert client.update_priorities("t", universe, priorities, wait=True) == 0
    value = (priorities + eps) ** alpha
    expected = value / value.sum()

    def draw() -> np.ndarray:
        ids = []
        for sample in _batches(client, per_request):
            k = np.searchsorted(universe, sample.ids, sorter=np.argsort(universe))
            position = np.argsort(universe)[k]
            np.testing.assert_allclose(sample.probabilities, expected[position], rtol=1e-9)
            np.testing.assert_allclose(
                sample.priorities, priorities[position], rtol=1e-6, atol=1e-9
            )
            assert sample.table_size == len(universe)
            w = (len(universe) * expected[position]) ** -beta
            # buffer-wide normalisation (cpprb): by (N * P_min)^-beta of the global P_min
            np.testing.assert_allclose(
                sample.weights, w / (len(universe) * expected.min()) ** -beta, rtol=1e-9
            )
            ids.append(sample.ids)
        return _counts(np.concatenate(ids), universe)

    assert_fits(draw, expected)


def test_priority_updates_go_to_the_shard_in_each_id() -> None:
    sampler = rc.Prioritized()
    server = Server(
        {"t": rc.ReplayBuffer(SPEC, 4 * 8, 4, sampler=sampler, sequence_length=1)}, num_shards=4
    )
    client = server.client(rng=0)
    writers = [client.writer("t", 1) for _ in range(4)]
    assert sorted(w.shard for w in writers) == [0, 1, 2, 3]
    for w in writers:
        w.add_batch(steps(1.0, 1))
        w.flush()
    ids = rc.ids.encode(np.array([0]), np.array([0]), 2)
    foreign = rc.ids.encode(np.array([0]), np.array([0]), 7)  # no such shard: skipped
    assert client.update_priorities("t", np.r_[ids, foreign], [9.0, 1.0], wait=True) == 1
    totals = [s.buffer.table.sampling_weight()[0] for s in server.shards["t"]]
    assert totals[2] > totals[0] == totals[1] == totals[3]


def test_info_sums_shards_and_lists_them() -> None:
    server = Server({"t": rc.ReplayBuffer(SPEC, 8 * 16, 8)}, num_shards=4)
    client = server.client()
    _fill_unevenly(client, "t", np.random.default_rng(0))
    client.sample("t", 10)
    info = client.info("t")
    assert len(info.shards) == 4
    assert info.capacity == 128 and [s.capacity for s in info.shards] == [32] * 4
    assert info.inserts == sum(s.inserts for s in info.shards) == 2 * (3 + 9 + 20 + 40)
    assert info.samples == 10 and info.num_stored == 2 * (3 + 9 + 16 + 16)  # rows hold 16
    assert info.leased_rows == 0
    assert any("shards" in line for line in info.lines())


def test_a_new_writer_on_released_rows_starts_a_new_episode() -> None:
    buf = rc.ReplayBuffer(SPEC, 2 * 32, 2, sequence_length=2)
    client = Server({"t": buf}).client(rng=0)
    with client.writer("t", 2) as first:
        for i in range(5):
            first.add_batch(steps(i, 2))  # mid-episode when it closes
    with client.writer("t", 2) as second:
        for i in range(5, 10):
            second.add_batch(steps(i, 2))
    obs = client.sample("t", 2000).data["obs"][:, :, 0]
    assert not ((obs[:, 0] == 4) & (obs[:, 1] == 5)).any()  # no window across the writers
    assert ((obs[:, 0] == 3) & (obs[:, 1] == 4)).any() and (
        (obs[:, 0] == 5) & (obs[:, 1] == 6)
    ).any()
    assert client.sample("t", 1).table_size == 2 * (4 + 4)


def test_rows_of_a_dead_writer_process_pass_to_a_new_writer() -> None:
    buf = rc.ReplayBuffer(SPEC, 2 * 8, 2)
    server = Server({"t": buf})
    shard = server.shards["t"][0]
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True
    )
    pid = int(dead.stdout)
    shard.reserve(2, socket.gethostname(), pid)  # a writer whose process has exited
    writer = server.client().writer("t", 2)
    assert writer.rows.tolist() == [0, 1]
    with pytest.raises(StateError, match="not held"):
        shard.extend(1, [np.asarray(v)[:, None] for _, v in sorted(steps(1, 2).items())])
    # an idle lease of a live process passes on only after lease_timeout
    other = Server({"t": rc.ReplayBuffer(SPEC, 2 * 8, 2)}, lease_timeout=0.2)
    client = other.client()
    idle = client.writer("t", 2)
    with pytest.raises(InvalidArgumentError, match="free row"):
        client.writer("t", 2)
    time.sleep(0.3)
    assert client.writer("t", 2).rows.tolist() == [0, 1]
    with pytest.raises(StateError, match="not held"):
        idle.add_batch(steps(1, 2))
        idle.flush()
    # a writer dropped without close() gives its rows back when garbage collected
    third = Server({"t": rc.ReplayBuffer(SPEC, 2 * 8, 2)}).client()
    third.writer("t", 2)
    assert third.writer("t", 2).rows.tolist() == [0, 1]


def test_rate_limiters_hold_across_the_service() -> None:
    buf = rc.ReplayBuffer(SPEC, 40, 2, rate_limiter=rc.MinSize(4))
    client = Server({"t": buf}).client()
    with pytest.raises(RateLimiterTimeout):
        client.sample("t", 1, timeout=0.05)
    got = []
    waiter = threading.Thread(target=lambda: got.append(client.sample("t", 3, timeout=5)))
    waiter.start()
    time.sleep(0.05)
    assert client.info("t").num_stored == 0  # other calls go on while a sample waits
    with client.writer("t", 2, chunk_length=1) as writer:
        writer.add_batch(steps(1, 2))
        writer.add_batch(steps(2, 2))
    waiter.join(5)
    assert len(got) == 1 and len(got[0].ids) == 3
    ratio = rc.ReplayBuffer(
        SPEC, 40, 2, rate_limiter=rc.SampleToInsertRatio(1.0, 2, error_buffer=4.0)
    )
    client = Server({"t": ratio}).client()
    writer = client.writer("t", 2, chunk_length=1, timeout=0.05)
    with pytest.raises(RateLimiterTimeout):
        for i in range(20):  # nobody samples: inserts block once the balance is spent
            writer.add_batch(steps(i, 2))
        writer.flush()


def test_split_rate_limiters_keep_their_ratio() -> None:
    limiter = rc.SampleToInsertRatio(2.0, 8, error_buffer=16.0)
    server = Server({"t": rc.ReplayBuffer(SPEC, 64, 8, rate_limiter=limiter)}, num_shards=4)
    configs = [s.buffer.config()["rate_limiter"]["config"] for s in server.shards["t"]]
    assert (
        configs == [{"samples_per_insert": 2.0, "min_size_to_sample": 2, "error_buffer": 4.0}] * 4
    )
    with pytest.raises(InvalidArgumentError, match="multiple of num_shards"):
        Server({"t": rc.ReplayBuffer(SPEC, 60, 6)}, num_shards=4)
    with pytest.raises(InvalidArgumentError, match="cannot be split"):
        Server({"t": rc.ReplayBuffer(SPEC, 64, 8, sampler=rc.Fifo())}, num_shards=4)
    full = rc.ReplayBuffer(SPEC, 64, 8)
    full.add_batch(steps(1, 8))
    with pytest.raises(InvalidArgumentError, match="built empty"):
        Server({"t": full}, num_shards=2)


def test_checkpoint_restores_and_counts_the_steps_lost_since(tmp_path) -> None:
    def make() -> rc.ReplayBuffer:
        return rc.ReplayBuffer(SPEC, 8 * 32, 8, sampler=rc.Prioritized(), sequence_length=1)

    server = Server({"t": make()}, num_shards=2, checkpoint_dir=tmp_path)
    client = server.client()
    _fill = [client.writer("t", 4, chunk_length=1) for _ in range(2)]
    for i in range(5):
        for w in _fill:
            w.add_batch(steps(i, 4))
    sample = client.sample("t", 8)
    client.update_priorities("t", sample.ids, np.full(8, 7.0), wait=True)
    assert client.checkpoint() == tmp_path
    assert (tmp_path / "service.json").exists()
    before = {s.index: s.buffer.state_dict() for s in server.shards["t"]}
    for w in _fill:
        w.add_batch(steps(9, 4))  # after the checkpoint: lost in the "crash" below
    # a new server on the same directory restores the checkpoint
    restored = Server({"t": make()}, num_shards=2, checkpoint_dir=tmp_path)
    info = restored.client().info("t")
    assert info.num_stored == 2 * 4 * 5 and info.lost_steps == 8
    for shard in restored.shards["t"]:
        tree = shard.buffer.state_dict()["table"]["sampler"]["values"]
        np.testing.assert_array_equal(tree, before[shard.index]["table"]["sampler"]["values"])
    client.reset("t")
    assert client.info("t").num_stored == 0
    with pytest.raises(InvalidArgumentError, match="needs a directory"):
        Server({"u": make()}).client().checkpoint()


def test_a_closed_client_and_writer_refuse_calls() -> None:
    client = Server({"t": rc.ReplayBuffer(SPEC, 8, 2)}).client()
    writer = client.writer("t", 2)
    writer.close()
    writer.close()
    with pytest.raises(StateError, match="closed"):
        writer.add_batch(steps(1, 2))
    client.close()
    with pytest.raises(StateError, match="closed"):
        client.info("t")


def test_bad_tables_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="non-empty dict"):
        Server({})
    with pytest.raises(InvalidArgumentError, match="ReplayBuffer"):
        Server({"t": object()})
    with pytest.raises(InvalidArgumentError, match="without '/'"):
        Server({"a/b": rc.ReplayBuffer(SPEC, 8, 2)})
    with pytest.raises(ShapeError):
        Server({"t": rc.ReplayBuffer(SPEC, 8, 2)}).client().writer("t", 2).add_batch(steps(1, 3))


def test_a_manager_backed_by_the_service_has_the_same_methods(tmp_path) -> None:
    server = Server({"replay": rc.ReplayBuffer(SPEC, 4 * 32, 4)}, checkpoint_dir=tmp_path)
    client = server.client()
    with rc.ReplayBufferManager(SPEC, checkpoint_dir=tmp_path, num_envs=2, service=client) as m:
        handle, observer = m.create_or_load_replay_buffer()
        assert isinstance(handle, rc.service.TableHandle)
        for i in range(3):
            observer(steps(i, 2))
        observer({k: np.stack([v, v], axis=1) for k, v in steps(5, 2).items()})  # [envs, T]
        m.checkpoint()  # flushes the writer, checkpoints the service
        assert m.num_frames() == 2 * 5 and m.has_checkpoint()
        batch = next(m.get_dataset(batch_size=8, framework="numpy"))
        assert batch.data["obs"].shape == (8, 3)
        with pytest.raises(rc.errors.CheckpointError, match="service checkpoint"):
            m.create_replay_buffer()
        m.create_replay_buffer(overwrite=True)
        assert m.num_frames() == 0
    # another manager on the same table: its own rows; the first one's were released
    second = rc.ReplayBufferManager(checkpoint_dir=tmp_path, num_envs=4, service=client)
    second.load_replay_buffer()
    with pytest.raises(InvalidArgumentError, match="has leaves"):
        rc.ReplayBufferManager(
            {"x": rc.ArraySpec((), np.float32)}, service=client
        ).create_or_load_replay_buffer()
    second.close()
    with pytest.raises(InvalidArgumentError, match=r"must be a recollect\.service\.Client"):
        rc.ReplayBufferManager(SPEC, service=object())


def test_a_sample_stream_keeps_requests_in_flight_and_raises_their_errors() -> None:
    buf = rc.ReplayBuffer(SPEC, 40, 2, rate_limiter=rc.MinSize(2))
    client = Server({"t": buf}).client()
    with rc.service.SampleStream(client.table("t"), 4, max_in_flight=1, timeout=0.1) as early:
        with pytest.raises(RateLimiterTimeout):
            next(early)
    with client.writer("t", 2) as writer:
        writer.add_batch(steps(1, 2))
    before = buf.info().samples
    stream = rc.service.SampleStream(client.table("t"), 4, max_in_flight=3, timeout=5)
    batches = [next(stream) for _ in range(6)]
    assert all(b.data["obs"].shape == (4, 3) for b in batches)
    deadline = time.monotonic() + 10
    while buf.info().samples - before < 4 * (6 + 3):  # three more requests are in flight
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.05)
    assert buf.info().samples - before == 4 * (6 + 3)  # and no more
    stream.close()
    assert list(stream) == []
    with pytest.raises(InvalidArgumentError, match="served table"):
        rc.service.SampleStream(buf, 4)


def _prioritized_server(num_shards: int) -> Server:
    """A served prioritized table "t" (alpha 1, no epsilon), 4 steps on each of 4 rows."""
    sampler = rc.Prioritized(priority_exponent=1.0, epsilon=0.0)
    buf = rc.ReplayBuffer(SPEC, 64, 4, sampler=sampler, sequence_length=1)
    server = Server({"t": buf}, num_shards=num_shards)
    client = server.client()
    writers = [client.writer("t", 4 // num_shards) for _ in range(num_shards)]
    for writer in writers:
        for i in range(4):
            writer.add_batch(steps(i, 4 // num_shards))
        writer.close()
    return server


def _total_priority(server: Server) -> float:
    return sum(s.buffer.table.sampling_weight()[0] for s in server.shards["t"])


def test_priority_updates_are_held_back_and_go_along_with_the_next_sample() -> None:
    server = _prioritized_server(2)
    client = server.client(rng=0)
    ids = client.sample("t", 256).ids
    target = ids[rc.ids.decode(ids)[0] == 1][0]  # a step of shard 1
    total = _total_priority(server)
    client.update_priorities("t", [target], [1e6])
    assert _total_priority(server) == total  # held back on the client
    sample = client.sample("t", 64)  # goes along (to shard 1), applied before the draw
    assert _total_priority(server) == pytest.approx(total - 1 + 1e6)
    assert (sample.ids == target).mean() > 0.9
    # on their own: past max_unsent_updates ids of a shard, past max_update_delay_s, by flush
    client.max_unsent_updates = 2
    client.update_priorities("t", [target], [5.0])
    assert _total_priority(server) == pytest.approx(total - 1 + 1e6)
    client.update_priorities("t", [target], [6.0])  # 2 ids wait for shard 1: sent in order
    assert _total_priority(server) == pytest.approx(total - 1 + 6.0)
    client.max_unsent_updates, client.max_update_delay_s = 4096, 0.05
    client.update_priorities("t", [target], [7.0])
    time.sleep(0.06)
    assert _total_priority(server) == pytest.approx(total - 1 + 6.0)
    other = ids[rc.ids.decode(ids)[0] == 0][0]
    client.update_priorities("t", [other], [3.0])  # the oldest waited too long: both go
    assert _total_priority(server) == pytest.approx(total - 2 + 7.0 + 3.0)
    client.max_update_delay_s = 60.0
    client.update_priorities("t", [target], [8.0])
    client.flush("t")
    assert _total_priority(server) == pytest.approx(total - 2 + 8.0 + 3.0)
    # wait=True sends what was held back first, then these, and counts only their skips
    client.update_priorities("t", [target], [9.0])
    assert client.update_priorities("t", [other], [4.0], wait=True) == 0
    assert _total_priority(server) == pytest.approx(total - 2 + 9.0 + 4.0)
    client.update_priorities("t", [target], [1.0])
    client.close()  # close sends them
    assert _total_priority(server) == pytest.approx(total - 2 + 1.0 + 4.0)


def test_sample_batches_returns_what_the_rate_limiter_allowed_then_raises() -> None:
    limiter = rc.SampleToInsertRatio(1.0, 1, error_buffer=(-8.0, 8.0))
    buf = rc.ReplayBuffer(SPEC, 64, 2, rate_limiter=limiter)
    client = Server({"t": buf}).client()
    with client.writer("t", 2) as writer:
        for i in range(4):
            writer.add_batch(steps(i, 2))
    batches = client.sample_batches("t", 4, 8, timeout=0.05)
    assert 1 <= len(batches) < 8 and all(b.ids.shape == (4,) for b in batches)
    assert buf.info().samples == 4 * len(batches)  # no batch drawn and dropped
    with pytest.raises(RateLimiterTimeout):
        client.sample_batches("t", 4, 8, timeout=0.05)
    with pytest.raises(InvalidArgumentError, match="num_batches"):
        client.sample_batches("t", 4, 0)
    # as a local buffer (issue 23): a table without priorities says so first
    with pytest.raises(InvalidArgumentError, match="Uniform sampling has no priorities"):
        client.update_priorities("t", [1, 2], [1.0])


def test_a_sample_stream_asks_for_batches_per_request() -> None:
    buf = rc.ReplayBuffer(SPEC, 40, 2)
    client = Server({"t": buf}).client()
    with client.writer("t", 2) as writer:
        for i in range(5):
            writer.add_batch(steps(i, 2))
    requests = []
    handle = client.table("t")
    sample_batches = handle.sample_batches
    handle.sample_batches = lambda *a, **k: requests.append(a[1]) or sample_batches(*a, **k)
    stream = rc.service.SampleStream(handle, 4, max_in_flight=2, batches_per_request=3)
    batches = [next(stream) for _ in range(7)]
    assert all(b.data["obs"].shape == (4, 3) and b.ids.shape == (4,) for b in batches)
    assert len({b.ids.tobytes() for b in batches}) > 1  # distinct draws, not one batch again
    stream.close()
    assert set(requests) == {3} and 3 <= len(requests) <= 2 + 3
    assert buf.info().samples == 4 * 3 * len(requests)
    with pytest.raises(InvalidArgumentError, match="batches_per_request"):
        rc.service.SampleStream(handle, 4, batches_per_request=0)
