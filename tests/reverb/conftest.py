"""Fixtures of the recollect.reverb tests: a server with common tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import recollect.reverb as reverb


def make_server(*tables: reverb.Table) -> reverb.Server:
    return reverb.Server(list(tables))


@pytest.fixture
def server() -> Iterator[reverb.Server]:
    tables = [
        reverb.Table(
            "uniform",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table.queue("queue", 3),
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
        ),
    ]
    with reverb.Server(tables) as s:
        yield s


@pytest.fixture
def client(server: reverb.Server) -> reverb.Client:
    return server.localhost_client()
