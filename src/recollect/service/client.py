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
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import optree

from recollect import ids as id_layout
from recollect.buffers import Sample
from recollect.errors import InvalidArgumentError, StateError
from recollect.samplers import importance_weights
from recollect.service.endpoint import Endpoint
from recollect.service.shard import ShardDescription, shard_path
from recollect.service.writer import Writer
from recollect.table import TableInfo

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
        self._closed = False
        self._on_close = on_close
        self._describe: dict[str, ShardDescription] = {}

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
            InvalidArgumentError: unknown table, or no shard has ``num_envs`` free rows.
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
            except InvalidArgumentError as err:
                if "free row" not in str(err):
                    raise
                error = err
        assert error is not None
        if len(endpoints) > 1:
            raise InvalidArgumentError(
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
            ShardUnavailableError when a shard is unreachable.
        """
        endpoints = self._endpoints(table)
        self._raise_failed_updates(table)
        if len(endpoints) == 1:
            endpoint = endpoints[0]
            sample, _ = endpoint.result(
                endpoint.submit("sample", batch_size, num_steps, timeout, options)
            )
            return sample
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
            raise InvalidArgumentError(f"`batch_size` must be an int >= 1; got {batch_size!r}.")
        if batch_size < 1:
            raise InvalidArgumentError(
                f"`batch_size` must be an int >= 1; got batch_size={batch_size!r}."
            )
        wait = None if timeout is None else timeout + TRANSPORT_GRACE_S
        handles = [e.submit("sampling_weight", num_steps) for e in endpoints]
        weights = np.array([_gather(endpoints, handles, wait)], np.float64).reshape(-1, 2)
        weight, sizes = weights[:, 0], weights[:, 1]
        total = float(weight.sum())
        with self._rng_lock:
            if total > 0:
                counts = self._rng.multinomial(batch_size, weight / total)
            else:  # nothing sampleable: one shard answers (waits on its limiter, or raises)
                counts = np.zeros(len(endpoints), np.int64)
                counts[self._rng.integers(len(endpoints))] = batch_size
        parts = np.flatnonzero(counts)
        handles = [
            endpoints[s].submit("sample", int(counts[s]), num_steps, timeout, options)
            for s in parts
        ]
        results = _gather([endpoints[s] for s in parts], handles, wait)
        return self._merge(table, parts, results, weight, sizes, options)

    def _merge(
        self,
        table: str,
        parts: np.ndarray,
        results: list[tuple[Sample, float]],
        weight: np.ndarray,
        sizes: np.ndarray,
        options: dict[str, Any],
    ) -> Sample:
        weight = weight.copy()
        for s, (sample, w) in zip(parts, results, strict=True):
            weight[s] = w  # the weight each shard drew with
            sizes[s] = sample.table_size
        total = float(weight.sum())
        samples = [sample for sample, _ in results]
        probabilities = np.concatenate(
            [sample.probabilities * (weight[s] / total) for s, sample in zip(parts, samples)]  # noqa: B905
        )
        table_size = int(sizes.sum())
        weights = None
        if samples[0].weights is not None:
            beta = options.get("importance_sampling_exponent")
            if beta is None:
                beta = self.describe(table).importance_sampling_exponent or 0.0
            weights = importance_weights(probabilities, table_size, beta)
        data = (
            samples[0].data
            if len(samples) == 1
            else optree.tree_map(lambda *xs: np.concatenate(xs), *[s.data for s in samples])
        )

        def cat(name: str) -> np.ndarray | None:
            values = [getattr(s, name) for s in samples]
            return None if values[0] is None else np.concatenate(values)

        return Sample(
            data,
            cat("ids"),
            probabilities,
            weights,
            cat("priorities"),
            cat("times_sampled"),
            table_size,
        )

    # -- priorities ----------------------------------------------------------------
    def update_priorities(
        self, table: str, ids: Any, priorities: Any, *, wait: bool = False
    ) -> int | None:
        """Sets priorities of ``table``'s windows; each id goes to the shard encoded in it.

        Args:
            table: the table's name.
            ids: int64 ``[B]`` sample ids.
            priorities: float ``[B]`` new priorities.
            wait: block until every shard applied them (then return the ids
                skipped). Otherwise return None at once; an error a shard raises
                is raised by the next ``sample`` or ``update_priorities`` of
                this table (or :meth:`flush`).

        Raises:
            InvalidArgumentError: ``ids`` and ``priorities`` differ in shape, or as
                ``ReplayBuffer.update_priorities`` (the shard's error).
        """
        endpoints = self._endpoints(table)
        self._raise_failed_updates(table)
        ids = np.asarray(ids)
        priorities = np.asarray(priorities)
        if len(endpoints) == 1:
            routed = [(endpoints[0], ids, priorities)]
        else:
            if ids.shape != priorities.shape or ids.ndim != 1:
                raise InvalidArgumentError(
                    f"`ids` and `priorities` must be 1-D of one length; got shapes {ids.shape} "
                    f"and {priorities.shape}."
                )
            shard, _, _ = id_layout.decode(ids.astype(np.int64, copy=False))
            routed = [
                (endpoints[s], ids[shard == s], priorities[shard == s])
                for s in np.unique(shard)
                if 0 <= s < len(endpoints)
            ]
        handles = [(e, e.submit("update_priorities", i, p)) for e, i, p in routed]
        if wait:
            skipped = sum(int(e.result(h)) for e, h in handles)
            return skipped + int(len(ids) - sum(len(i) for _, i, _ in routed))
        with self._updates_lock:
            pending = self._updates[table]
            pending.extend(handles)
            oldest = [pending.popleft() for _ in range(max(len(pending) - 64, 0))]
        for e, h in oldest:  # bounded: settle the oldest
            e.result(h)
        return None

    def _raise_failed_updates(self, table: str) -> None:
        while True:
            with self._updates_lock:
                pending = self._updates.get(table)
                if not pending or not pending[0][0].done(pending[0][1]):
                    return
                e, h = pending.popleft()
            e.result(h)

    def flush(self, table: str | None = None) -> None:
        """Waits for the asynchronous priority updates of ``table`` (None: every table).

        Raises:
            What a shard raised for one of them.
        """
        for name in [table] if table is not None else list(self._updates):
            with self._updates_lock:
                pending = self._updates.get(name)
                handles = list(pending or ())
                if pending:
                    pending.clear()
            for e, h in handles:
                e.result(h)

    # -- management ----------------------------------------------------------------
    def info(self, table: str) -> TableInfo:
        """``table``'s :class:`~recollect.TableInfo`, summed over shards, with one entry per
        shard in ``shards`` and the steps lost in shard crashes in ``lost_steps``."""
        endpoints = self._endpoints(table)
        infos = _gather(endpoints, [e.submit("info") for e in endpoints], None)
        return merge_infos(infos)

    def reset(self, table: str) -> None:
        """Forgets every stored step of ``table`` on every shard (Reverb ``reset``)."""
        endpoints = self._endpoints(table)
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
                "checkpoint() needs a directory: pass one, or start the service with "
                "checkpoint_dir=..."
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
        """Waits for pending priority updates; stops the service if this client owns it."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self._on_close is not None:
                self._on_close()

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

    def update_priorities(self, ids: Any, priorities: Any, *, wait: bool = False) -> int | None:
        """:meth:`Client.update_priorities` of this table."""
        return self.client.update_priorities(self.name, ids, priorities, wait=wait)

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
