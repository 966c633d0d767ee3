"""Calls a client makes to several shards at once: results waited for together, and the
closing client's ``Cancel`` sent everywhere."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint, results

__all__ = ["cancel_everywhere", "gather"]


def gather(endpoints: Sequence[Endpoint], handles: list[Any], timeout: float | None) -> list[Any]:
    """Results of one handle per endpoint, all waited for under one ``timeout``."""
    return results(zip(endpoints, handles, strict=True), timeout)


def cancel_everywhere(endpoints: Sequence[Endpoint], client: int) -> None:
    """Tells every shard of ``endpoints`` that ``client`` is closed (``Shard.cancel``),
    waiting up to 5 s for each; raises nothing (a dead shard has no request left to end)."""
    calls = []
    for endpoint in endpoints:
        with contextlib.suppress(Exception):
            calls.append((endpoint, endpoint.send(rq.Cancel(client))))
    for endpoint, handle in calls:
        with contextlib.suppress(Exception):
            endpoint.result(handle, 5.0)
