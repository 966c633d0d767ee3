"""Closing a Client ends the iteration over its tables: a SampleStream and the torch,
JAX and tf.data adapters over ``client.table(name)`` stop (StopIteration), also when
their requests wait on a rate limiter, for a client of an embedded Server, one from
``recollect.ray.connect`` and the one ``serve`` returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import recollect as rc
from recollect.errors import StateError
from recollect.service import SampleStream, Server

SPEC = {"x": rc.ArraySpec((2,), np.float32)}
#: a generous bound: the issue's target is 1 s; measured times are printed
ENDS_WITHIN_S = 5.0


def blocked_table(limit: int = 10_000) -> rc.ReplayBuffer:
    """An empty table whose rate limiter keeps every sample waiting."""
    return rc.ReplayBuffer(SPEC, 64, 2, rate_limiter=rc.MinSize(min(limit, 64)))


def filled_table() -> rc.ReplayBuffer:
    return rc.ReplayBuffer(SPEC, 64, 2)


def fill(client: rc.service.Client) -> None:
    with client.writer("t", 2, chunk_length=4) as writer:
        for _ in range(8):
            writer.add_batch({"x": np.ones((2, 2), np.float32)})


def ends_on_close(client: Any, iterator: Iterator) -> float:
    """Seconds from ``client.close()`` until ``next(iterator)``, blocked on a thread,
    ended with StopIteration; fails when it raised anything else or never ended."""
    outcome: list = []

    def consume() -> None:
        try:
            next(iterator)
            outcome.append("a batch")
        except StopIteration:
            outcome.append(StopIteration)
        except BaseException as err:
            outcome.append(err)
        outcome.append(time.monotonic())

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    time.sleep(0.5)  # the request reached the rate limiter and waits
    assert not outcome, outcome
    closed = time.monotonic()
    client.close()
    thread.join(ENDS_WITHIN_S)
    assert outcome, f"still blocked {ENDS_WITHIN_S} s after client.close()"
    assert outcome[0] is StopIteration, outcome[0]
    return outcome[1] - closed


def recollect_threads(before: frozenset[threading.Thread] = frozenset()) -> list[str]:
    """Names of the sample-request and prefetch threads still running, other than those
    of ``before`` (threads earlier tests left behind)."""
    # (not the process-wide pools of the codecs and the gatherer, which earlier tests start)
    prefixes = ("recollect-sample", "recollect-prefetch")
    return [
        t.name for t in threading.enumerate() if t.name.startswith(prefixes) and t not in before
    ]


def stream_of(client: Any) -> Iterator:
    return SampleStream(client.table("t"), 4)


def torch_of(client: Any) -> Iterator:
    torch_adapter = pytest.importorskip("recollect.torch")
    return iter(torch_adapter.ReplayDataset(client.table("t"), 4))


def jax_of(client: Any) -> Iterator:
    jax_adapter = pytest.importorskip("recollect.jax")
    return jax_adapter.as_iterator(client.table("t"), 4)


def tf_of(client: Any) -> Iterator:
    tf_data = pytest.importorskip("recollect.tf_data")
    return iter(tf_data.as_dataset(client.table("t"), 4))


ADAPTERS: dict[str, Callable[[Any], Iterator]] = {
    "stream": stream_of,
    "torch": torch_of,
    "jax": jax_of,
    "tf_data": tf_of,
}


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_closing_an_embedded_servers_client_ends_an_iterator_blocked_on_the_limiter(
    adapter: str,
) -> None:
    earlier = frozenset(threading.enumerate())
    server = Server({"t": blocked_table()})
    try:
        client = server.client()
        iterator = ADAPTERS[adapter](client)
        took = ends_on_close(client, iterator)
        print(f"\n{adapter}: ended {took:.3f} s after client.close()")
        deadline = time.monotonic() + ENDS_WITHIN_S
        while recollect_threads(earlier) and time.monotonic() < deadline:
            time.sleep(0.05)  # the request's thread ends too, not only the iterator
        assert not recollect_threads(earlier)
        # a client of the same server that was not closed still waits on the limiter
        other = server.client()
        with pytest.raises(rc.errors.RateLimiterTimeout):
            other.sample("t", 4, timeout=0.3)
    finally:
        server.close()


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_closing_a_client_while_batches_flow_ends_the_iteration(adapter: str) -> None:
    server = Server({"t": filled_table()})
    try:
        client = server.client()
        fill(client)
        iterator = ADAPTERS[adapter](client)
        for _ in range(3):
            next(iterator)
        client.close()
        with pytest.raises(StopIteration):
            for _ in range(10):  # at most the batches already prefetched
                next(iterator)
    finally:
        server.close()


def test_a_closed_clients_sample_raises_state_error_on_its_own() -> None:
    server = Server({"t": blocked_table()})
    try:
        client = server.client()
        errors: list = []

        def sample() -> None:
            try:
                client.sample("t", 4)
            except Exception as err:
                errors.append(err)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        time.sleep(0.3)
        client.close()
        thread.join(ENDS_WITHIN_S)
        assert errors and isinstance(errors[0], StateError), errors
        assert str(errors[0]).startswith("this Client is closed")
    finally:
        server.close()


@pytest.mark.slow  # ~5 s each (a Ray session per test): CI and --run-slow
@pytest.mark.parametrize("owner", [False, True], ids=["connect", "serve"])
def test_closing_a_ray_client_ends_a_stream_blocked_on_the_limiter(owner: bool, request) -> None:
    request.getfixturevalue("ray_session")
    rc_ray = pytest.importorskip("recollect.ray")
    name = f"close-ends-{owner}"
    owning = rc_ray.serve({"t": blocked_table()}, name=name)
    try:
        client = owning if owner else rc_ray.connect(name)
        took = ends_on_close(client, stream_of(client))
        print(f"\nray {'serve' if owner else 'connect'}: ended {took:.3f} s after close()")
        if not owner:  # the service still serves other clients
            assert rc_ray.connect(name).info("t").size == 0
    finally:
        owning.close()
