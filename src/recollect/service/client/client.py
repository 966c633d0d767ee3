"""Client: one interface to tables served in-process or on Ray, in one or more shards.

Sampling across shards is exact (the same distribution as one buffer holding
every shard's data; :mod:`recollect.service.client.assemble`). The client's parts live
in their own modules: routing of ids to shards (:mod:`~recollect.service.client.routing`),
batch splitting and reassembly (:mod:`~recollect.service.client.assemble`), held-back
priority updates (:mod:`~recollect.service.client.held_updates`), the checkpoint
(:mod:`~recollect.service.client.checkpoints`), writer placement
(:mod:`~recollect.service.client.placement`), and its priority updates and deletes
(:mod:`~recollect.service.client.updates`).
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers import Sample
from recollect.errors import InvalidArgumentError, StateError
from recollect.service.client.assemble import (
    assemble,
    draw_over_shards,
    importance_exponent,
    merge_infos,
    split_batches,
)
from recollect.service.client.calls import cancel_everywhere, gather
from recollect.service.client.checkpoints import save_shards
from recollect.service.client.held_updates import HeldUpdates
from recollect.service.client.placement import place_writer
from recollect.service.client.routing import id_bases
from recollect.service.client.table_handle import TableHandle
from recollect.service.client.updates import ClientUpdates
from recollect.service.client.writer import Writer
from recollect.service.wire import requests as rq
from recollect.service.wire.endpoint import Endpoint
from recollect.service.wire.layout import MANIFEST
from recollect.service.wire.replies import ShardDescription
from recollect.table import TableInfo

__all__ = ["MANIFEST", "Client", "TableHandle", "merge_infos"]

#: seconds a client waits for a shard beyond the rate-limiter ``timeout`` it passed, so
#: the shard's own RateLimiterTimeout arrives before the transport gives up
TRANSPORT_GRACE_S = 30.0


class Client:
    """Writes to, samples from and manages served tables (same API in-process and on Ray).

    Made by :meth:`Server.client <recollect.service.Server.client>`,
    ``recollect.ray.serve`` or ``recollect.ray.connect``.

    Args:
        shards: ``{table name: [Endpoint per shard, in shard order]}``.
        name: the service's name (``recollect.ray.connect(name)``), or None.
        checkpoint_dir: the service's default checkpoint directory, or None.
        rng: seed of the client's split of batches over shards.
        on_close: called once by :meth:`close` (e.g. to stop an owned server).
    """

    #: ids per shard a client holds back before it sends them on their own
    max_unsent_updates: int = 4096
    #: seconds after which held-back updates go out with the next ``update_priorities``
    max_update_delay_s: float = 0.05

    def __init__(
        self,
        shards: Mapping[str, Sequence[Endpoint]],
        *,
        name: str | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        rng: Any = None,
        on_close: Any = None,
    ) -> None:
        self._shards = {table: list(endpoints) for table, endpoints in shards.items()}
        self.name = name
        self.checkpoint_dir = checkpoint_dir
        self._rng = np.random.default_rng(rng)
        self._rng_lock = threading.Lock()
        self._next_shard: dict[str, int] = {}
        self._held = HeldUpdates()  # priority updates held back or not yet settled
        #: per table: importance weights normalised buffer-wide (asked of shard 0 once)
        self._normalization: dict[str, bool] = {}
        self._closed = False
        self._on_close = on_close
        self._describe: dict[str, ShardDescription] = {}
        #: this client's id in its sample requests: closing it ends its waiting ones
        self._id = secrets.randbits(62) + 1
        # the shard field of a table's ids starts after the other tables' (recollect.ids)
        self._id_base = id_bases(self._shards)
        self._updates = ClientUpdates(self._endpoints, self.describe, self._held, self._id_base)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every call then raises StateError)."""
        return self._closed

    # -- tables ---------------------------------------------------------------
    @property
    def tables(self) -> list[str]:
        """Names of the served tables."""
        return list(self._shards)

    def num_shards(self, table: str) -> int:
        """Shards of ``table``."""
        return len(self._endpoints(table))

    def endpoints(self, table: str) -> list[Endpoint]:
        """The :class:`~recollect.service.Endpoint` of each shard of ``table``, in shard order."""
        return list(self._endpoints(table))

    def _endpoints(self, table: str) -> list[Endpoint]:
        if self._closed:
            raise StateError("this Client is closed.")
        endpoints = self._shards.get(table)
        if endpoints is None:
            raise InvalidArgumentError(
                f"no table named {table!r}; this service serves {sorted(self._shards)}."
            )
        return endpoints

    def describe(self, table: str) -> ShardDescription:
        """The :class:`~recollect.service.shard.ShardDescription` of ``table``'s shard 0
        (spec, window length, sampler; the same for every shard)."""
        found = self._describe.get(table)
        if found is None:
            endpoint = self._endpoints(table)[0]
            found = self._describe[table] = endpoint.result(endpoint.send(rq.Describe()))
        return found

    def data_spec(self, table: str) -> Any:
        """The spec of ``table``'s steps."""
        return self.describe(table).data_spec

    def table(self, name: str) -> TableHandle:
        """A :class:`TableHandle`: the table as a sample source for the dataset adapters."""
        self._endpoints(name)
        return TableHandle(self, name)

    # -- writing ----------------------------------------------------------------
    def writer(
        self,
        table: str,
        num_envs: int,
        *,
        chunk_length: int = 64,
        max_in_flight: int = 4,
        timeout: float | None = None,
    ) -> Writer:
        """A :class:`~recollect.service.Writer` of ``num_envs`` envs on rows leased from one
        shard (shards taken round-robin, skipping full ones).

        Args:
            table: the table's name.
            num_envs: rows to lease (the leading dim of ``add_batch`` leaves).
            chunk_length: steps per row sent in one request.
            max_in_flight: chunks sent and not acknowledged before the next waits.
            timeout: rate-limiter wait of each chunk on the shard (None: forever).

        Raises:
            InvalidArgumentError: unknown table.
            NoFreeRowsError: no shard has ``num_envs`` free rows (an InvalidArgumentError).
            ShardUnavailableError: the chosen shard is unreachable.
        """
        endpoints = self._endpoints(table)
        spec = self.data_spec(table)
        # round-robin from a per-process start: one writer per process spreads over shards
        start = self._next_shard.get(table, os.getpid())
        self._next_shard[table] = start + 1

        def open_writer(endpoint: Endpoint) -> Writer:
            return Writer(
                endpoint,
                spec,
                num_envs,
                chunk_length=chunk_length,
                max_in_flight=max_in_flight,
                timeout=timeout,
            )

        return place_writer(table, endpoints, start, num_envs, open_writer)

    # -- sampling ----------------------------------------------------------------
    def sample(
        self,
        table: str,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> Sample:
        """Samples ``batch_size`` windows of ``table`` over all its shards (exactly as one buffer).

        Args:
            table: the table's name.
            batch_size: windows to draw, >= 1.
            num_steps: window length, as ``ReplayBuffer.sample``.
            timeout: rate-limiter wait on the shards (None: forever, 0: never).
            **options: passed to the sampler (``importance_sampling_exponent``).

        Returns:
            :class:`~recollect.Sample` with global ``probabilities`` and
            ``table_size`` and, for prioritized tables, importance ``weights``
            computed from them. Items come grouped by shard.

        Raises:
            As ``ReplayBuffer.sample`` (the shard's error, same type and message);
            ShardUnavailableError when a shard is unreachable; a held-back
            priority update's error (see :meth:`update_priorities`).
        """
        return self.sample_batches(table, batch_size, 1, num_steps, timeout, **options)[0]

    def sample_batches(
        self,
        table: str,
        batch_size: int,
        num_batches: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> list[Sample]:
        """Samples ``num_batches`` batches of ``batch_size`` windows in one request per shard.

        Each batch is distributed as one :meth:`sample`; a request costs a
        transport's fixed cost per call once (on Ray a round trip per shard,
        about 1 ms), so several batches per request raise throughput. Over
        several shards the batches share one query of the shards' weights and
        each is split over shards by its own multinomial draw. Priority
        updates this client held back go along and are applied first.

        Args:
            table, batch_size, num_steps, timeout, **options: as :meth:`sample`
                (``timeout`` bounds the whole request).
            num_batches: batches to draw, >= 1.

        Returns:
            A list of :class:`~recollect.Sample`, ``num_batches`` long; shorter
            (never empty) when the rate limiter's ``timeout`` ran out after the
            first batch.

        Raises:
            As :meth:`sample`, for the first batch.
        """
        endpoints = self._endpoints(table)
        self._held.settle_done(table)
        batch_size = positive_int("batch_size", batch_size)
        k = positive_int("num_batches", num_batches)
        wait = None if timeout is None else timeout + TRANSPORT_GRACE_S

        def split(weight: np.ndarray) -> np.ndarray:
            with self._rng_lock:
                return split_batches(self._rng, batch_size, k, weight)

        drawn = draw_over_shards(
            endpoints,
            [batch_size] * k,
            rq.SampleBatches([], num_steps, timeout, options, None, self._id),
            lambda shard: self._held.take(table, shard),
            split,
            wait,
            buffer_normalized := self._buffer_normalized(table),
        )
        beta = importance_exponent(self.describe(table), options)

        def shard_bounds(shard: int) -> np.ndarray:
            endpoint = endpoints[shard]
            return np.asarray(endpoint.result(endpoint.send(rq.SamplingBounds())), np.float64)

        bounds = shard_bounds if buffer_normalized else None
        return assemble(*drawn, beta, self._id_base[table], bounds)

    def _buffer_normalized(self, table: str) -> bool:
        """Whether ``table``'s importance weights are normalised buffer-wide (``(N P_min)^-beta``,
        ``Prioritized(weight_normalization="buffer")``); asked of shard 0 once."""
        found = self._normalization.get(table)
        if found is None:
            endpoint = self._endpoints(table)[0]
            mode = endpoint.result(endpoint.send(rq.WeightNormalization()))
            found = self._normalization[table] = mode == "buffer"
        return found

    # -- changes to stored windows ---------------------------------------------------
    def update_priorities(
        self, table: str, ids: Any, priorities: Any, *, wait: bool = False
    ) -> int | None:
        """Sets priorities of ``table``'s windows; each id goes to the shard encoded in it.

        Ids that name no shard of ``table`` are skipped, as a local buffer skips
        ids of another shard: ids of another table of the service (each table's
        ids carry its own shard numbers, see :mod:`recollect.ids`), negative ids.

        Without ``wait``, updates are held back on the client and go to their
        shard along with this client's next sample request of the table (applied
        before its draw), or on their own once a shard has
        :attr:`max_unsent_updates` ids waiting or the oldest waited
        :attr:`max_update_delay_s` seconds (checked by each call), or by
        :meth:`flush` and :meth:`close`: one request carries many updates.

        Args:
            table: the table's name.
            ids: int64 ``[B]`` sample ids.
            priorities: float ``[B]`` new priorities.
            wait: send now, after every update of the table held back, and
                block until the shards applied them; then return the ids
                skipped (of these ids). Otherwise return None
                at once; an error a shard raises is raised by a later ``sample``
                or ``update_priorities`` of this table (or :meth:`flush`).

        Raises:
            InvalidArgumentError: as ``ReplayBuffer.update_priorities`` (same
                message): the sampler has no priorities, ``ids`` and
                ``priorities`` are not 1-D of one length, ids are not integers,
                a priority is NaN, inf or negative. Checked by this call, also
                when the update is held back, so a bad call never takes another
                call's update down with it.
        """
        return self._updates.update_priorities(
            table,
            ids,
            priorities,
            wait=wait,
            max_unsent=self.max_unsent_updates,
            max_delay_s=self.max_update_delay_s,
        )

    def delete(self, table: str, ids: Any) -> int:
        """Deletes ``table``'s windows starting at ``ids`` (``ReplayBuffer.delete``; Reverb:
        ``mutate_priorities`` deletes); each id goes to the shard encoded in it. Priority
        updates held back for the table are sent first (applied before the deletes).

        Args:
            table: the table's name.
            ids: int64 ``[K]`` sample ids.

        Returns:
            The number of ids skipped: overwritten, unknown, of no shard of this
            table, or deleted already (as :meth:`update_priorities` counts them).

        Raises:
            InvalidArgumentError: ``ids`` is not 1-D integers; nothing is deleted.
        """
        return self._updates.delete(table, ids)

    def flush(self, table: str | None = None) -> None:
        """Sends the held-back priority updates of ``table`` (None: every table) and waits
        for all its asynchronous ones.

        Raises:
            What a shard raised for one of them.
        """
        self._updates.flush(table)

    # -- management ----------------------------------------------------------------
    def info(self, table: str) -> TableInfo:
        """``table``'s :class:`~recollect.TableInfo`, summed over shards, with one entry per
        shard in ``shards`` and the steps lost in shard crashes in ``lost_steps``."""
        endpoints = self._endpoints(table)
        infos = gather(endpoints, [e.send(rq.Info()) for e in endpoints], None)
        return merge_infos(infos)

    def reset(self, table: str) -> None:
        """Forgets every stored step of ``table`` on every shard (Reverb ``reset``), and the
        priority updates of it this client held back."""
        endpoints = self._endpoints(table)
        for shard in range(len(endpoints)):
            self._held.take(table, shard)
        gather(endpoints, [e.send(rq.Reset()) for e in endpoints], None)

    def checkpoint(self, directory: str | os.PathLike | None = None) -> Path:
        """Checkpoints every shard of every table to ``directory`` (default: the
        ``checkpoint_dir`` the service was started with), the shards in parallel.

        Layout: ``directory/<table>/shard-<k>/`` (a ``ReplayBuffer`` checkpoint
        each) and ``directory/service.json``. A Server or ``serve`` started with
        ``checkpoint_dir=directory`` restores from it.

        Returns:
            The directory.

        Raises:
            InvalidArgumentError: no directory given and no ``checkpoint_dir``.
        """
        directory = directory if directory is not None else self.checkpoint_dir
        if directory is None:
            raise InvalidArgumentError(
                "checkpoint() needs a directory and this service was started without "
                'checkpoint_dir: pass one, e.g. client.checkpoint("ckpt/replay"), or start '
                'the service with Server(tables, checkpoint_dir="ckpt/replay") or '
                'recollect.ray.serve(tables, checkpoint_dir="ckpt/replay") (a restart then '
                "restores from it)."
            )
        self.flush()
        return save_shards(Path(directory), {t: self._endpoints(t) for t in self.tables})

    def close(self) -> None:
        """Waits for pending priority updates, ends this client's sample requests (those
        waiting on a rate limiter raise StateError within about 0.25 s, so the iterators
        and dataset adapters over its tables end), and stops the service if this client
        owns it. Idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            try:  # ends this client's waiting requests (best effort: a dead shard has none)
                cancel_everywhere([e for es in self._shards.values() for e in es], self._id)
            finally:
                if self._on_close is not None:
                    self._on_close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        tables = {t: len(e) for t, e in self._shards.items()}
        return f"Client(name={self.name!r}, shards per table={tables})"
