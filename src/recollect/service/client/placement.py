"""Writer placement: which shard of a table leases a new writer's rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from recollect.errors import NoFreeRowsError
from recollect.service.client.writer import Writer
from recollect.service.wire.endpoint import Endpoint

__all__ = ["place_writer"]


def place_writer(
    table: str,
    endpoints: Sequence[Endpoint],
    start: int,
    num_envs: int,
    open_writer: Callable[[Endpoint], Writer],
) -> Writer:
    """``open_writer(endpoint)`` on the first shard, round-robin from ``start``, with
    ``num_envs`` free rows.

    Raises:
        NoFreeRowsError: no shard has them (the last shard's error; naming the table
            when it has several shards).
    """
    error: NoFreeRowsError | None = None
    for k in range(len(endpoints)):
        try:
            return open_writer(endpoints[(start + k) % len(endpoints)])
        except NoFreeRowsError as err:
            error = err
    assert error is not None  # a table has at least one shard
    if len(endpoints) > 1:
        raise NoFreeRowsError(
            f"no shard of table {table!r} has {num_envs} free rows ({error})"
        ) from error
    raise error
