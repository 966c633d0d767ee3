"""Client: one interface to tables served in-process or on Ray, in one or more shards.

Sampling across shards is exact (the same distribution as one buffer holding
every shard's data): the client asks every shard for its sampling weight (its
number of valid windows, or its priority sum), splits the batch over shards by
one multinomial draw with those weights, lets each shard sample its part, and
turns local probabilities into global ones (``p_global = p_local * W_s / W``,
with ``W_s`` the shard's weight at its draw and ``W`` the sum). ``table_size``
is the sum of the shards' sizes and importance weights are computed on the
client from both (Schaul et al. 2016; Reverb's ``SampleInfo`` carries the same
two numbers). Items of a batch come grouped by shard.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import optree

from recollect import ids as id_layout
from recollect.buffers import Sample
from recollect.errors import InvalidArgumentError, NoFreeRowsError, StateError
from recollect.samplers import importance_weights
from recollect.samplers.prioritized import check_update
from recollect.service.endpoint import Endpoint
from recollect.service.shard import (
    SampledBatches,
    ShardDescription,
    concatenate_samples,
    shard_path,
)
from recollect.service.weighting import global_min_probability
from recollect.service.writer import Writer
from recollect.table import TableInfo
from recollect.table.table import positive_int

__all__ = ["Client", "TableHandle", "merge_infos"]

#: name of the service manifest in a checkpoint directory
MANIFEST = "service.json"

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

    def __init__(
        self,
        shards: dict[str, list[Endpoint]],
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
        self._updates: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self._updates_lock = threading.Lock()  # sample/update_priorities from several threads
        # held-back priority updates: {table: {shard: [(ids, priorities)]}}, their sizes, age
        self._unsent: dict[str, dict[int, list[tuple[np.ndarray, np.ndarray]]]] = (
            collections.defaultdict(dict)
        )
        self._unsent_size: dict[tuple[str, int], int] = {}
        self._unsent_since: dict[str, float] = {}
        self._closed = False
        self._on_close = on_close
        self._describe: dict[str, ShardDescription] = {}
        #: this client's id in its sample requests: closing it ends its waiting ones
        self._id = secrets.randbits(62) + 1
        # the shard field of a table's ids starts after the other tables' (recollect.ids)
        sizes = [len(e) for e in self._shards.values()]
        self._id_base = dict(zip(self._shards, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True))
        total = sum(sizes)
        if total > id_layout.MAX_SHARDS:
            raise InvalidArgumentError(
                f"a service serves at most {id_layout.MAX_SHARDS} shards over all its tables "
                f"(ids hold 8 bits of shard); got {total}. Serve fewer shards per table, or "
                "tables in several services."
            )
        self._normalization: dict[str, bool] = {}

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
            found = self._describe[table] = endpoint.result(endpoint.submit("describe"))
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
        error: Exception | None = None
        for k in range(len(endpoints)):
            endpoint = endpoints[(start + k) % len(endpoints)]
            try:
                return Writer(
                    endpoint,
                    spec,
                    num_envs,
                    chunk_length=chunk_length,
                    max_in_flight=max_in_flight,
                    timeout=timeout,
                )
            except NoFreeRowsError as err:
                error = err
        assert error is not None
        if len(endpoints) > 1:
            raise NoFreeRowsError(
                f"no shard of table {table!r} has {num_envs} free rows ({error})"
            ) from error
        raise error

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
        self._raise_failed_updates(table)
        batch_size = positive_int("batch_size", batch_size)
        k = positive_int("num_batches", num_batches)
        wait = None if timeout is None else timeout + TRANSPORT_GRACE_S
        if len(endpoints) == 1:
            endpoint = endpoints[0]
            request = ([batch_size] * k, num_steps, timeout, options)
            drawn = endpoint.result(
                endpoint.submit("sample_batches", *request, self._take_unsent(table, 0), self._id),
                wait,
            )
            counts = np.full((k, 1), batch_size, np.int64)
            return self._assemble(table, counts, np.zeros(1, np.int64), [drawn], None, options)
        # buffer-wide importance weights also need each shard's smallest sampling value
        query = "sampling_bounds" if self._buffer_normalized(table) else "sampling_weight"
        handles = [
            e.submit(query, num_steps, self._take_unsent(table, s)) for s, e in enumerate(endpoints)
        ]
        queried = np.array([_gather(endpoints, handles, wait)], np.float64)
        queried = queried.reshape(len(endpoints), -1)
        weight = queried[:, 0]
        total = float(weight.sum())
        with self._rng_lock:
            if total > 0:  # counts[i, s]: windows of batch i drawn on shard s
                counts = self._rng.multinomial(batch_size, weight / total, size=k)
            else:  # nothing sampleable: one shard answers (waits on its limiter, or raises)
                counts = np.zeros((k, len(endpoints)), np.int64)
                counts[:, self._rng.integers(len(endpoints))] = batch_size
        parts = np.flatnonzero(counts.any(axis=0))
        handles = [
            endpoints[s].submit(
                "sample_batches",
                counts[:, s].tolist(),
                num_steps,
                timeout,
                options,
                self._take_unsent(table, int(s)),
                self._id,
            )
            for s in parts
        ]
        results = _gather([endpoints[s] for s in parts], handles, wait)
        return self._assemble(table, counts, parts, results, queried, options)

    def _assemble(
        self,
        table: str,
        counts: np.ndarray,
        parts: np.ndarray,
        results: list[SampledBatches],
        queried: np.ndarray | None,
        options: dict[str, Any],
    ) -> list[Sample]:
        """Batches from the shards' draws, vectorized over batches and shards.

        Args:
            counts: int ``[k, S]`` windows of batch ``i`` drawn on shard ``s``.
            parts: int ``[P]`` the shards asked (those with any window).
            results: the :class:`SampledBatches` of each shard of ``parts``.
            queried: float64 ``[S, 2]`` ``(weight, table_size)`` each shard
                reported before the split (None for one shard).

        Global probability of a window drawn on shard ``s`` in batch ``i``:
        ``p_local * W[i, s] / sum_s W[i, s]``, with ``W[i, s]`` the weight shard
        ``s`` drew batch ``i`` with (the queried one where it drew nothing).
        """
        n = min(len(r.weights) for r in results)  # batches every shard drew
        counts = counts[:n]
        num_shards = counts.shape[1]
        bounds = queried
        if queried is None:
            queried = np.ones((num_shards, 2))
        weight = np.broadcast_to(queried[:, 0], (n, num_shards)).copy()
        sizes = np.broadcast_to(queried[:, 1], (n, num_shards)).copy()
        for s, r in zip(parts, results, strict=True):
            drew = ~np.isnan(r.weights[:n])
            weight[drew, s] = r.weights[:n][drew]
            sizes[drew, s] = r.table_sizes[:n][drew]
        share = weight / weight.sum(axis=1, keepdims=True)  # [n, S]
        table_sizes = sizes.sum(axis=1).astype(np.int64)
        if len(results) == 1:
            rows, order = results[0].sample, None
            factor = np.repeat(share[:, parts[0]], counts[:, parts[0]])
        else:  # rows of batch i, shard after shard, out of the shards' samples concatenated
            local = counts[:, parts]  # [n, P]
            lengths = local.ravel()
            base = np.cumsum([0] + [len(r.sample.ids) if r.sample else 0 for r in results])
            starts = (base[:-1] + np.cumsum(local, axis=0) - local).ravel()
            offsets = np.cumsum(lengths) - lengths
            order = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()))
            rows = concatenate_samples([r.sample for r in results if r.sample is not None])
            factor = np.repeat(share[:, parts].ravel(), lengths)

        def take(a: np.ndarray | None) -> np.ndarray | None:
            if a is None:
                return None
            return a[: len(factor)] if order is None else a[order]

        data = optree.tree_map(take, rows.data)
        ids, priorities, times_sampled = (
            take(rows.ids),
            take(rows.priorities),
            take(rows.times_sampled),
        )
        if self._id_base[table]:  # the table's tag: its shards' numbers among all tables'
            ids = ids + (self._id_base[table] << id_layout.SHARD_SHIFT)
        probabilities = take(rows.probabilities) * factor
        beta = self.describe(table).importance_sampling_exponent  # None: no priorities
        if beta is not None and options.get("importance_sampling_exponent") is not None:
            beta = options["importance_sampling_exponent"]
        local_weights, min_probability = None, None
        if beta is not None and self._buffer_normalized(table):
            if bounds is None and rows.weights is not None:  # one shard: its weights are global
                local_weights = take(rows.weights)
            else:
                if bounds is None:  # one shard, several draws: ask for its P_min numerator
                    endpoint = self._endpoints(table)[int(parts[0])]
                    bounds = np.array([endpoint.result(endpoint.submit("sampling_bounds"))])
                min_probability = global_min_probability(bounds, weight, parts)
        out = []
        b = int(counts[0].sum())
        for i in range(n):
            part = slice(i * b, (i + 1) * b)
            p = probabilities[part]
            if local_weights is not None:
                weights = local_weights[part]
            elif beta is not None:
                p_min = None if min_probability is None else min_probability[i]
                weights = importance_weights(p, table_sizes[i], beta, p_min)
            else:
                weights = None
            out.append(
                Sample(
                    optree.tree_map(lambda leaf, part=part: leaf[part], data),
                    ids[part],
                    p,
                    weights,
                    None if priorities is None else priorities[part],
                    None if times_sampled is None else times_sampled[part],
                    int(table_sizes[i]),
                )
            )
        return out

    def _buffer_normalized(self, table: str) -> bool:
        """Whether ``table``'s importance weights are normalised buffer-wide (``(N P_min)^-beta``,
        ``Prioritized(weight_normalization="buffer")``); asked of shard 0 once."""
        found = self._normalization.get(table)
        if found is None:
            endpoint = self._endpoints(table)[0]
            mode = endpoint.result(endpoint.submit("weight_normalization"))
            found = self._normalization[table] = mode == "buffer"
        return found

    # -- priorities ----------------------------------------------------------------
    #: ids per shard a client holds back before it sends them on their own
    max_unsent_updates: int = 4096
    #: seconds after which held-back updates go out with the next ``update_priorities``
    max_update_delay_s: float = 0.05

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
        endpoints = self._endpoints(table)
        self._raise_failed_updates(table)
        if not self.describe(table).priorities:  # the shard raises as a local buffer
            endpoint = endpoints[0]
            return endpoint.result(endpoint.submit("update_priorities", ids, priorities))
        # a local buffer's checks and messages, made by this call for this call
        ids, priorities, _ = check_update(ids, priorities)
        # each id to its shard; ids of no shard of this table (another table's, negative)
        # are skipped, as a local buffer skips ids of another shard
        shard, local = self._shard_ids(table, ids)
        if len(endpoints) == 1 and not shard.any():  # the common case: no mask to apply
            routed = [(0, local, priorities)]
        else:
            routed = [
                (int(s), local[shard == s], priorities[shard == s])
                for s in np.unique(shard)
                if 0 <= s < len(endpoints)
            ]
        if wait:  # held-back updates first, applied before these (their skips not counted)
            held = [(s, self._take_unsent(table, s)) for s in range(len(endpoints))]
            earlier = [
                (endpoints[s], endpoints[s].submit("update_priorities", *u)) for s, u in held if u
            ]
            for e, h in earlier:
                e.result(h)
            handles = [
                (endpoints[s], endpoints[s].submit("update_priorities", i, p)) for s, i, p in routed
            ]
            skipped = sum(int(e.result(h)) for e, h in handles)
            return skipped + int(len(ids) - sum(len(i) for _, i, _ in routed))
        now = time.monotonic()
        with self._updates_lock:
            held = self._unsent[table]
            for s, i, p in routed:
                if not len(i):
                    continue
                held.setdefault(s, []).append((i, p))
                self._unsent_size[table, s] = self._unsent_size.get((table, s), 0) + len(i)
            self._unsent_since.setdefault(table, now)
            due = now - self._unsent_since[table] >= self.max_update_delay_s
            send = [
                s
                for s in list(held)
                if due or self._unsent_size[table, s] >= self.max_unsent_updates
            ]
        for s in send:
            self._send_unsent(table, s)
        return None

    def _shard_ids(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each id's shard among ``table``'s (outside ``[0, shards)``: of no shard of the
        table: another table's, negative) and the id as that shard numbers it."""
        base = self._id_base[table]
        shard = id_layout.shard_of(ids) - base
        return shard, ids - (base << id_layout.SHARD_SHIFT) if base else ids

    def _take_unsent(self, table: str, shard: int) -> tuple[np.ndarray, ...] | None:
        """The held-back updates of ``table``'s shard ``shard``, concatenated, with the
        length of each call (:data:`~recollect.service.shard.PriorityUpdates`; None: none)."""
        with self._updates_lock:
            held = self._unsent.get(table)
            parts = held.pop(shard, None) if held else None
            if not parts:
                return None
            self._unsent_size.pop((table, shard), None)
            if not held:
                self._unsent_since.pop(table, None)
        if len(parts) == 1:
            return parts[0]
        return (
            np.concatenate([i for i, _ in parts]),
            np.concatenate([p for _, p in parts]),
            np.array([len(i) for i, _ in parts], np.int64),
        )

    def _send_unsent(self, table: str, shard: int) -> None:
        """Sends the held-back updates of one shard on their own (not waited for)."""
        updates = self._take_unsent(table, shard)
        if updates is None:
            return
        endpoint = self._endpoints(table)[shard]
        handle = endpoint.submit("update_priorities", *updates)
        with self._updates_lock:
            pending = self._updates[table]
            pending.append((endpoint, handle))
            oldest = [pending.popleft() for _ in range(max(len(pending) - 64, 0))]
        for e, h in oldest:  # bounded: settle the oldest
            e.result(h)

    def _raise_failed_updates(self, table: str) -> None:
        while True:
            with self._updates_lock:
                pending = self._updates.get(table)
                if not pending or not pending[0][0].done(pending[0][1]):
                    return
                e, h = pending.popleft()
            e.result(h)

    def flush(self, table: str | None = None) -> None:
        """Sends the held-back priority updates of ``table`` (None: every table) and waits
        for all its asynchronous ones.

        Raises:
            What a shard raised for one of them.
        """
        names = [table] if table is not None else list(set(self._updates) | set(self._unsent))
        for name in names:
            for shard in list(self._unsent.get(name, ())):
                self._send_unsent(name, shard)
            with self._updates_lock:
                pending = self._updates.get(name)
                handles = list(pending or ())
                if pending:
                    pending.clear()
            for e, h in handles:
                e.result(h)

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
        endpoints = self._endpoints(table)
        ids = np.asarray(ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise InvalidArgumentError(
                f"delete needs 1-D integer ids (Sample.ids); got shape {ids.shape}, dtype "
                f"{ids.dtype}."
            )
        self.flush(table)
        ids = ids.astype(np.int64, copy=False)
        shard, local = self._shard_ids(table, ids)
        routed = [(int(s), local[shard == s]) for s in np.unique(shard) if 0 <= s < len(endpoints)]
        handles = [(endpoints[s], endpoints[s].submit("delete", i)) for s, i in routed]
        skipped = sum(int(e.result(h)) for e, h in handles)
        return skipped + int(len(ids) - sum(len(i) for _, i in routed))

    # -- management ----------------------------------------------------------------
    def info(self, table: str) -> TableInfo:
        """``table``'s :class:`~recollect.TableInfo`, summed over shards, with one entry per
        shard in ``shards`` and the steps lost in shard crashes in ``lost_steps``."""
        endpoints = self._endpoints(table)
        infos = _gather(endpoints, [e.submit("info") for e in endpoints], None)
        return merge_infos(infos)

    def reset(self, table: str) -> None:
        """Forgets every stored step of ``table`` on every shard (Reverb ``reset``), and the
        priority updates of it this client held back."""
        endpoints = self._endpoints(table)
        for shard in range(len(endpoints)):
            self._take_unsent(table, shard)
        _gather(endpoints, [e.submit("reset") for e in endpoints], None)

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
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.flush()
        for table in self.tables:
            endpoints = self._endpoints(table)
            handles = [
                e.submit("save", str(shard_path(directory, table, e.shard))) for e in endpoints
            ]
            _gather(endpoints, handles, None)
        manifest = {"tables": {t: {"num_shards": self.num_shards(t)} for t in self.tables}}
        tmp = directory / f".{MANIFEST}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, directory / MANIFEST)
        return directory

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
            try:
                self._cancel_requests()
            finally:
                if self._on_close is not None:
                    self._on_close()

    def _cancel_requests(self) -> None:
        """Tells every shard that this client is closed (best effort: a dead shard has no
        request of it left to end)."""
        calls = []
        for endpoints in self._shards.values():
            for endpoint in endpoints:
                with contextlib.suppress(Exception):
                    calls.append((endpoint, endpoint.submit("cancel", self._id)))
        for endpoint, handle in calls:
            with contextlib.suppress(Exception):
                endpoint.result(handle, 5.0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        tables = {t: len(e) for t, e in self._shards.items()}
        return f"Client(name={self.name!r}, shards per table={tables})"


class TableHandle:
    """One served table as a sample source: what ``client.table(name)`` returns.

    The dataset adapters (``recollect.torch.ReplayDataset``,
    ``recollect.jax.as_iterator``, ``recollect.tf_data.as_dataset``) accept it
    and keep up to ``max_in_flight`` sample requests outstanding.
    """

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name

    @property
    def data_spec(self) -> Any:
        """The table's spec."""
        return self.client.data_spec(self.name)

    @property
    def sequence_length(self) -> int | None:
        """The table's fixed window length, or None."""
        return self.client.describe(self.name).sequence_length

    @property
    def closed(self) -> bool:
        """Whether the client is closed (the adapters' iterators then end)."""
        return self.client.closed

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> Sample:
        """:meth:`Client.sample` of this table."""
        return self.client.sample(self.name, batch_size, num_steps, timeout, **options)

    def sample_batches(
        self,
        batch_size: int,
        num_batches: int,
        num_steps: int | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> list[Sample]:
        """:meth:`Client.sample_batches` of this table."""
        return self.client.sample_batches(
            self.name, batch_size, num_batches, num_steps, timeout, **options
        )

    def update_priorities(self, ids: Any, priorities: Any, *, wait: bool = False) -> int | None:
        """:meth:`Client.update_priorities` of this table."""
        return self.client.update_priorities(self.name, ids, priorities, wait=wait)

    def delete(self, ids: Any) -> int:
        """:meth:`Client.delete` of this table."""
        return self.client.delete(self.name, ids)

    def writer(self, num_envs: int, **kwargs: Any) -> Writer:
        """:meth:`Client.writer` of this table."""
        return self.client.writer(self.name, num_envs, **kwargs)

    def info(self) -> TableInfo:
        """:meth:`Client.info` of this table."""
        return self.client.info(self.name)

    def __repr__(self) -> str:
        return f"TableHandle({self.name!r}, {self.client!r})"


def _gather(endpoints: list[Endpoint], handles: list[Any], timeout: float | None) -> list[Any]:
    """Results of one handle per endpoint, waited for together when the endpoints allow."""
    if len(handles) > 1 and all(type(e) is type(endpoints[0]) for e in endpoints):
        endpoints[0].wait(handles, timeout)
    return [e.result(h, timeout) for e, h in zip(endpoints, handles, strict=True)]


def merge_infos(infos: list[TableInfo]) -> TableInfo:
    """One :class:`TableInfo` of a table from its shards' (sums; the shards in ``shards``)."""
    if len(infos) == 1:
        return infos[0]
    first = infos[0]

    def total(name: str) -> Any:
        return sum(getattr(i, name) for i in infos)

    inserts, samples = total("inserts"), total("samples")
    return TableInfo(
        size=total("size"),
        capacity=total("capacity"),
        num_stored=total("num_stored"),
        num_episodes=total("num_episodes"),
        inserts=inserts,
        samples=samples,
        deletes=total("deletes"),
        samples_per_insert=samples / inserts if inserts else 0.0,
        max_times_sampled=first.max_times_sampled,
        rate_limiter=first.rate_limiter,
        insert_blocked_s=total("insert_blocked_s"),
        sample_blocked_s=total("sample_blocked_s"),
        sampler=first.sampler,
        lost_steps=total("lost_steps"),
        leased_rows=total("leased_rows"),
        shards=tuple(infos),
    )
