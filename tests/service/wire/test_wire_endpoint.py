"""An endpoint is ``send`` and ``result`` only (issue #37): a client, its writers, its
priority updates and :func:`~recollect.service.wire.endpoint.results` work through an
endpoint with nothing else; ``result(handle, 0.0)`` of an unfinished call raises
ShardNoAnswerError and leaves it to be asked again."""

from __future__ import annotations

import numpy as np
import pytest

import recollect as rc
from recollect.errors import InvalidArgumentError, ShardNoAnswerError, ShardUnavailableError
from recollect.service import Server
from recollect.service.client.held_updates import HeldUpdates
from recollect.service.shard import Shard
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import LocalEndpoint, results

SPEC = {"x": rc.ArraySpec((), np.float32)}
ENVS = 4


class Deferred:
    """An endpoint with only ``send`` and ``result``: a call runs when its result is
    asked with a timeout other than 0 (or on :meth:`finish`); ``result(h, 0.0)`` of a
    call not run yet raises ShardNoAnswerError, as a shard that has not answered."""

    def __init__(self, shard: Shard) -> None:
        self._local = LocalEndpoint(shard)
        self.table = shard.table
        self.shard = shard.index
        self._pending: dict[int, rq.Request] = {}
        self._answers: dict[int, object] = {}
        self._count = 0
        self.timeouts: list[float | None] = []

    def send(self, request: rq.Request) -> int:
        handle = self._count
        self._count += 1
        self._pending[handle] = request
        return handle

    def finish(self) -> None:
        for handle in sorted(self._pending):
            self._answers[handle] = self._local.send(self._pending.pop(handle))

    def result(self, handle: int, timeout: float | None = None) -> object:
        self.timeouts.append(timeout)
        if handle in self._pending:
            if timeout == 0:
                raise ShardNoAnswerError(f"call {handle} did not answer within 0 s")
            self.finish()
        return self._local.result(self._answers.pop(handle))


def prioritized() -> rc.ReplayBuffer:
    return rc.ReplayBuffer(SPEC, 64 * ENVS, ENVS, sequence_length=1, sampler=rc.Prioritized())


def test_a_client_writes_samples_and_updates_through_send_and_result_only() -> None:
    server = Server({"t": prioritized()}, num_shards=2)
    endpoints = [Deferred(s) for s in server.shards["t"]]
    client = rc.service.Client({"t": endpoints}, rng=0)
    for endpoint in endpoints:
        assert not hasattr(endpoint, "wait") and not hasattr(endpoint, "done")
    for _ in range(2):
        with client.writer("t", ENVS // 2) as writer:
            for k in range(16):
                writer.add_batch({"x": np.full(ENVS // 2, k, np.float32)})
    assert sum(len(s.buffer) for s in server.shards["t"]) == 2 * 16 * ENVS // 2
    sample = client.sample("t", 32)
    assert sample.ids.shape == (32,)
    client.update_priorities("t", sample.ids, np.full(32, 2.0))  # held back
    client.update_priorities("t", sample.ids, np.full(32, 3.0), wait=True)
    client.close()
    server.close()


def test_results_wait_for_every_call_under_one_deadline() -> None:
    shard = Shard("t", rc.ReplayBuffer(SPEC, 64, ENVS))
    endpoint = Deferred(shard)
    calls = [(endpoint, endpoint.send(rq.WeightNormalization())) for _ in range(3)]
    assert results(calls, 5.0) == [shard.weight_normalization()] * 3
    assert all(t is not None and t <= 5.0 for t in endpoint.timeouts)
    assert endpoint.timeouts == sorted(endpoint.timeouts, reverse=True)  # one deadline
    endpoint.timeouts.clear()
    calls = [(endpoint, endpoint.send(rq.WeightNormalization())) for _ in range(2)]
    assert results(calls) == [shard.weight_normalization()] * 2
    assert endpoint.timeouts == [None, None]


def test_results_raise_the_first_error_in_order() -> None:
    shard = Shard("t", prioritized())
    endpoint = Deferred(shard)
    bad = rq.UpdatePriorities(np.array([0]), np.array([-1.0]))
    calls = [(endpoint, endpoint.send(rq.WeightNormalization())), (endpoint, endpoint.send(bad))]
    with pytest.raises(InvalidArgumentError, match="priorit"):
        results(calls, 5.0)


def test_settle_done_keeps_an_unfinished_update_and_settles_finished_ones_in_order() -> None:
    shard = Shard("t", prioritized())
    endpoint = Deferred(shard)
    held = HeldUpdates()
    bad = rq.UpdatePriorities(np.array([0]), np.array([-1.0]))
    held.sent("t", endpoint, endpoint.send(bad))
    held.sent("t", endpoint, endpoint.send(rq.WeightNormalization()))
    held.settle_done("t")  # nothing answered: nothing settled, nothing raised
    assert held.tables() == ["t"]
    endpoint.finish()
    with pytest.raises(InvalidArgumentError, match="priorit"):  # the oldest's error, once
        held.settle_done("t")
    held.settle_done("t")  # the second finished too: settled without error
    held.drain("t")
    assert endpoint.timeouts == [0.0, 0.0, 0.0]


def test_no_answer_is_a_shard_unavailable_error() -> None:
    assert issubclass(ShardNoAnswerError, ShardUnavailableError)
