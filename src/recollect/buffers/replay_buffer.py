"""ReplayBuffer: a table (window index + sampler) over a storage, behind one facade."""

from __future__ import annotations

import os
from typing import Any, ClassVar, Self

import numpy as np

from recollect.buffers.memmap_state import MemmapState
from recollect.buffers.sample import Sample
from recollect.buffers.saveable import check_saveable
from recollect.buffers.tf_agents_api import TFAgentsReads
from recollect.errors import (
    CheckpointError,
    InvalidArgumentError,
    RecollectError,
    ShapeError,
    SpecError,
)
from recollect.ids import encode
from recollect.memory import check_memory, estimate_memory
from recollect.samplers.base import Sampler, registered_sampler
from recollect.specs import FlatSpec
from recollect.state.files import Saved, load_consistent, write_checkpoint
from recollect.state.manifest import describe_spec, rebuild_spec
from recollect.storage.base import Storage
from recollect.storage.factory import (
    block_storage,
    bool_scalar,
    make_storage,
    prepare_writes,
    resolve_compression,
)
from recollect.storage.frame_store import FrameStack, resolve_frame_stacks
from recollect.storage.gather import Gatherer
from recollect.storage.ring import RingStorage
from recollect.table import Draw, Table, TableInfo
from recollect.table.rate_limiters import RateLimiter, rate_limiter_from_config
from recollect.table.table import RngLike, positive_int
from recollect.validation import check_structure, convert_step, exact_matcher

__all__ = ["ReplayBuffer", "RngLike"]


def frame_stacks_config(frame_stacks: dict[str, Any] | None) -> dict[str, Any]:
    """JSON description of ``{leaf path: FrameStack}``."""
    return {path: stack.config() for path, stack in (frame_stacks or {}).items()}


def frame_stacks_from_config(config: dict[str, Any]) -> dict[str, FrameStack] | None:
    """Inverse of :func:`frame_stacks_config`."""
    stacks = {}
    for path, c in (config or {}).items():
        padding = c["padding"] if isinstance(c["padding"], str) else np.asarray(c["padding"])
        stacks[path] = FrameStack(**{**c, "padding": padding})
    return stacks or None


class ReplayBuffer(TFAgentsReads):
    """A replay buffer of ``num_envs`` rows, each a ring of ``capacity // num_envs`` steps.

    ``add_batch`` appends one step to every row; ``sample`` draws windows of
    ``num_steps`` consecutive steps of one row. Storage is preallocated, one
    contiguous ``[num_envs, max_length, *leaf_shape]`` array per spec leaf.

    Episode-aware mode (RLDS convention): when the spec has a top-level bool
    ``is_last`` leaf, a window may end on an ``is_last`` step but never contain
    one before its last step. Without it, windows respect only the stored
    range (TF-Agents behaviour). Windows never span a ring's write position.

    Args:
        data_spec: nest of :class:`~recollect.ArraySpec` (or objects with
            ``.shape``/``.dtype``) describing ONE step.
        capacity: total steps stored across all rows; a multiple of ``num_envs``.
        num_envs: env rows (TF-Agents: ``batch_size``); ``add_batch`` leaves have
            this leading dim.
        rng: int seed, ``np.random.Generator``, ``SeedSequence`` or None; all
            sampling randomness comes from it.
        sampler: a :class:`~recollect.samplers.Sampler`; default :class:`Uniform`.
        sequence_length: fixed window length, required by samplers that score
            windows (prioritized); ``sample`` then defaults ``num_steps`` to it.
        storage: ``"numpy"`` (RAM, default) or ``"memmap"`` (``.npy`` files in
            ``directory``, for buffers larger than RAM; an existing directory is
            reopened with its data, counters and sampler state).
        directory: where memmap storage keeps its files (memmap only).
        frame_stacks: ``{leaf path: FrameStack}``: those leaves hold stacked
            frames; only the newest frame of each step is stored and stacks are
            rebuilt at sample time, bit-exact (needs an ``is_first`` or
            ``is_last`` leaf). See :class:`~recollect.FrameStack`.
        compression: ``{leaf path: codec}``: those leaves keep each step's value
            (each frame, with ``frame_stacks``) compressed in large blocks; a
            codec is ``"zstd"`` (``pip install recollect[compression]``),
            ``"lz4"``, ``"zlib"`` or an object such as
            ``recollect.storage.ZstdCodec(level=3)``. Samples are bit-exact;
            RAM only (not with ``storage="memmap"``). See
            :mod:`recollect.storage.codecs` for measured sizes and speeds.
        force: allocate a RAM buffer even when it exceeds ``MemAvailable``.
        gatherer: a :class:`~recollect.storage.gather.Gatherer` to share between
            buffers (default: the buffer's own).
        shard: the table shard encoded in ids (set by a replay service; 0 here).
        track_times_sampled: count how often each window was returned
            (``Sample.times_sampled``); costs about 14 us per ``sample(256)`` of W2,
            so off by default (``times_sampled`` is then None).
        recover: memmap only: reopen a ``directory`` that was written after its
            last flush (the process was killed) at its last flushed state, with
            a ``UserWarning``; :attr:`recovered_steps_dropped` says how many steps
            were lost (written since that flush, or flushed but overwritten since).
        rate_limiter: a :class:`~recollect.RateLimiter` (``rc.MinSize(n)``,
            ``rc.SampleToInsertRatio(...)``, ``rc.Queue(n)``, ...): ``add_batch``
            and ``sample`` wait (argument ``timeout``) while it forbids them.
            None (default): nothing waits; sampling without a valid window raises
            NotEnoughDataError, as ``MinSize(1)`` would block.
        max_times_sampled: remove a window once it was sampled this many times
            (0: never). ``rc.Fifo()`` + ``max_times_sampled=1`` + ``rc.Queue(n)``
            is a queue. Turns ``track_times_sampled`` on. Removal happens after a
            batch: a random sampler may draw a window more than k times within one
            batch. Adapters prefetch batches ahead, so with a queue the prefetched
            (not yet consumed) batches are dropped when the iterator closes.

    Raises:
        InvalidArgumentError: ``capacity`` < ``num_envs``, not a multiple of it,
            or a non-positive argument; a sampler already serving another buffer.
        SpecError: the spec is malformed, or ``is_last`` is not a bool scalar.
        InsufficientMemoryError: a RAM buffer larger than the available memory
            (see :func:`~recollect.estimate_memory`); use memmap or ``force=True``.
        CheckpointError: ``directory`` holds another buffer (other spec, geometry,
            frame stacks, ``sequence_length`` or sampler) or unflushed writes.

    Example:
        >>> spec = {"observation": ArraySpec((4,), np.float32), "is_last": ArraySpec((), bool)}
        >>> buf = ReplayBuffer(spec, capacity=1000, num_envs=4, rng=0)
        >>> buf.add_batch({"observation": np.zeros((4, 4), np.float32),
        ...                "is_last": np.zeros(4, bool)})
        >>> buf.num_frames()
        4
    """

    kind: ClassVar[str] = "ReplayBuffer"

    def __init__(
        self,
        data_spec: Any,
        capacity: int,
        num_envs: int = 1,
        *,
        rng: RngLike = None,
        sampler: Sampler | None = None,
        sequence_length: int | None = None,
        storage: str = "numpy",
        directory: Any = None,
        frame_stacks: dict[str, Any] | None = None,
        force: bool = False,
        gatherer: Gatherer | None = None,
        shard: int = 0,
        track_times_sampled: bool = False,
        recover: bool = False,
        rate_limiter: RateLimiter | None = None,
        max_times_sampled: int = 0,
        compression: dict[str, Any] | None = None,
    ) -> None:
        capacity = positive_int("capacity", capacity)
        num_envs = positive_int("num_envs", num_envs)
        if capacity < num_envs or capacity % num_envs:
            raise InvalidArgumentError(
                f"`capacity` must be a positive multiple of `num_envs` (each env row holds "
                f"capacity // num_envs steps); got capacity={capacity}, num_envs={num_envs}. "
                f"Use capacity={max(num_envs, capacity - capacity % num_envs)}."
            )
        self._flat = FlatSpec(data_spec)
        self._capacity = capacity
        self._num_envs = num_envs
        self._max_length = capacity // num_envs
        self._is_last = self._find_is_last()
        self._closed = False
        resolve_frame_stacks(self._flat, frame_stacks)  # validates before anything is built
        codecs = resolve_compression(self._flat, compression, storage)
        self._table = Table(
            num_envs,
            self._max_length,
            sampler=sampler,
            sequence_length=sequence_length,
            episode_aware=self._is_last is not None,
            rng=rng,
            shard=shard,
            leaf_paths=self._flat.paths,
            track_times_sampled=track_times_sampled,
            rate_limiter=rate_limiter,
            max_times_sampled=max_times_sampled,
        )
        self._config = {
            "spec": describe_spec(self._flat.spec),
            "capacity": capacity,
            "num_envs": num_envs,
            "frame_stacks": frame_stacks_config(frame_stacks),
            "sequence_length": self._table.sequence_length,
            "sampler": {"type": self._table.sampler.name, "config": _sampler_config(sampler)},
            "shard": shard,
            "track_times_sampled": bool(track_times_sampled),
        }
        if rate_limiter is not None:
            self._config["rate_limiter"] = {
                "type": rate_limiter.name,
                "config": json_safe(rate_limiter.get_config()),
            }
        if max_times_sampled:
            self._config["max_times_sampled"] = self._table.max_times_sampled
        if codecs:
            paths = self._flat.paths
            self._config["compression"] = {paths[i]: c.config() for i, c in codecs.items()}
        check_memory(
            estimate_memory(
                self._flat.spec,
                capacity,
                num_envs,
                frame_stacks=frame_stacks,
                compression=compression,
                sampler=self._table.sampler,
                track_times_sampled=track_times_sampled,
            ),
            storage,
            force,
        )
        self._persist = None if directory is None else MemmapState(directory, self._config, recover)
        try:
            self._storage = make_storage(
                self._flat,
                num_envs,
                self._max_length,
                is_last=self._is_last,
                storage=storage,
                directory=directory,
                reopen=self._persist is not None and self._persist.reopen,
                frame_stacks=frame_stacks,
                gatherer=gatherer,
                compression=self._config.get("compression"),
            )
        except BaseException:
            if self._persist is not None:  # a full disk leaves no half-created directory
                self._persist.discard_created()
            raise
        # compressed leaves are compressed before the table lock is taken
        self._prepare = prepare_writes(self._storage) if codecs else None
        # add_batch input that needs no conversion (exact dtypes and shapes) skips convert_step
        self._match_batch = exact_matcher(self._flat, (num_envs,))
        # no memmap bookkeeping and no rate limiter: writes to every row take the short path
        self._plain_writes = self._persist is None and self._table.rate_limiter is None
        # ``add`` (num_envs == 1) writes unbatched leaves straight into a plain numpy ring
        self._match_step = exact_matcher(self._flat, ())
        self._ring_writes = (
            self._plain_writes and type(self._storage) is RingStorage and num_envs == 1
        )
        if self._persist is not None:
            try:
                self._persist.attach(self._storage, self._table, self._table.lock, self)
            except BaseException:
                self._storage = None  # unmap before the files are removed
                self._persist.discard_created()
                raise

    def _find_is_last(self) -> int | None:
        i = bool_scalar(self._flat, "is_last")
        if "is_last" in self._flat.paths and i is None:
            leaf = self._flat.leaves[self._flat.index("is_last")]
            raise SpecError(
                f"data_spec leaf 'is_last' marks episode ends and must be a bool scalar; "
                f"got shape {leaf.shape}, dtype {leaf.dtype}. Rename it to opt out of "
                "episode-aware sampling."
            )
        return i

    # -- properties -------------------------------------------------------
    @property
    def data_spec(self) -> Any:
        """The spec of one step (a nest of :class:`~recollect.ArraySpec`)."""
        return self._flat.spec

    @property
    def flat_spec(self) -> FlatSpec:
        """The flattened spec: leaf paths, shapes and dtypes in storage order."""
        return self._flat

    @property
    def table(self) -> Table:
        """The :class:`~recollect.table.Table`: window index, sampler, RNG and lock."""
        return self._table

    @property
    def storage(self) -> Storage:
        """The :class:`~recollect.storage.base.Storage` holding the stored bytes."""
        return self._storage

    @property
    def lock(self) -> Any:
        """The table's re-entrant lock; hold it to make several calls one atomic step."""
        return self._table.lock

    @property
    def capacity(self) -> int:
        """Total steps the buffer holds across rows."""
        return self._capacity

    @property
    def num_envs(self) -> int:
        """Number of env rows."""
        return self._num_envs

    @property
    def max_length(self) -> int:
        """Steps per env row (``capacity // num_envs``)."""
        return self._max_length

    @property
    def sequence_length(self) -> int | None:
        """The fixed window length, or None."""
        return self._table.sequence_length

    @property
    def episode_aware(self) -> bool:
        """Whether the spec has a top-level ``is_last`` leaf."""
        return self._is_last is not None

    @property
    def sampler(self) -> Sampler:
        """The sampler deciding which windows come back."""
        return self._table.sampler

    @property
    def rng(self) -> np.random.Generator:
        """The generator all sampling draws from."""
        return self._table.rng

    @property
    def nbytes(self) -> int:
        """Bytes allocated: stored steps plus the table (index, sampler, counts); equals
        :func:`~recollect.estimate_memory` of the same arguments. Compressed leaves
        count the arena blocks in use (measured: it grows as compressed bytes are
        stored) and their offset index."""
        return self._storage.nbytes + self._table.nbytes

    def num_frames(self) -> int:
        """Steps currently stored, over all rows."""
        return self._table.num_stored

    def steps_per_row(self) -> np.ndarray:
        """int64 ``[num_envs]``: steps currently stored in each row."""
        with self._table.lock:
            return self._table.index.stored.copy()

    def __len__(self) -> int:
        return self.num_frames()

    def __repr__(self) -> str:
        return (
            f"ReplayBuffer(capacity={self._capacity}, num_envs={self._num_envs}, "
            f"stored={self.num_frames()}, leaves={self._flat.paths}, "
            f"sampler={type(self.sampler).__name__})"
        )

    # -- writing ----------------------------------------------------------
    def add(self, step: Any, *, timeout: float | None = None) -> None:
        """Appends one step (a nest matching the spec, no env dim); only when ``num_envs == 1``.

        ``timeout``: as in :meth:`add_batch`.

        Raises:
            InvalidArgumentError: the buffer has several env rows.
            SpecError, ShapeError, DTypeError, CastError: the step does not
                match the spec; nothing is written.
        """
        if self._ring_writes:  # one env row in a plain numpy ring: the short path
            leaves = self._match_step(step)  # exact dtypes and shapes: nothing to convert
            if leaves is not None:
                table = self._table
                with table.lock:  # the ring's only row takes the unbatched leaves
                    is_last = self._is_last
                    is_last = None if is_last is None else np.reshape(leaves[is_last], 1)
                    if table.write_unbatched(self._storage, leaves, is_last):
                        return
        elif self._num_envs != 1:
            raise InvalidArgumentError(
                f"`add` takes one step and works only when num_envs == 1; this buffer has "
                f"num_envs={self._num_envs}. Use add_batch with leaves of leading dim "
                f"{self._num_envs}."
            )
        leaves = convert_step(self._flat, step, (), "add")  # casts, or the error
        self.write_leaves([leaf[None] for leaf in leaves], timeout=timeout)

    def add_batch(self, steps: Any, rows: Any = None, *, timeout: float | None = None) -> None:
        """Appends one step to every env row, or to the env rows ``rows`` only.

        Each row has its own clock: with ``rows``, only the listed rows advance,
        so writers of different rows may write at their own pace. Values are
        cast to the spec's dtype only when safe (``same_kind``, no value lost).
        The whole batch is validated before anything is written.

        Args:
            steps: a nest matching the spec; every leaf has leading dim
                ``num_envs`` (``len(rows)`` with ``rows``).
            rows: None (every row) or distinct int row indices in ``[0, num_envs)``.
            timeout: with a rate limiter, seconds to wait while it forbids the
                insert (None: forever, 0: never); ignored without one.

        Raises:
            SpecError: a leaf is missing or extra.
            ShapeError: a leaf's shape is not ``[num_envs, *leaf_shape]``.
            DTypeError: a dtype cannot be cast safely (e.g. float into an int leaf).
            CastError: a cast would lose values (out of range, overflow).
            InvalidArgumentError: ``rows`` empty, repeated, out of range or not integers.
            RateLimiterTimeout: the rate limiter still forbids the insert after ``timeout``.
            StateError: the buffer was closed while the insert waited.
        """
        if rows is None:
            leaves = self._match_batch(steps)  # the common case, checked per leaf in one pass
            if leaves is not None and self._prepare is not None:
                leaves = self._prepare(leaves)
            if leaves is not None and self._plain_writes:
                table = self._table
                with table.lock:  # every row at one clock: the short path of write_leaves
                    is_last = None if self._is_last is None else leaves[self._is_last]
                    if table.write_all(self._storage, leaves, is_last):
                        return
            if leaves is None:  # anything unusual: the full check (casts, or the error)
                leaves = convert_step(self._flat, steps, (self._num_envs,), "add_batch")
            self.write_leaves(leaves, timeout=timeout)
            return
        rows = self._check_rows(rows)
        leaves = convert_step(self._flat, steps, (len(rows),), "add_batch")
        self.write_leaves(leaves, rows, timeout=timeout)

    def _check_rows(self, rows: Any) -> np.ndarray:
        array = np.asarray(rows)
        if array.ndim != 1 or not len(array) or array.dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"`rows` must be a non-empty 1-D sequence of int row indices; got {rows!r}."
            )
        array = array.astype(np.int64)
        bad = (array < 0) | (array >= self._num_envs)
        if bad.any():
            raise InvalidArgumentError(
                f"`rows` must lie in [0, num_envs={self._num_envs}); got {int(array[bad][0])}."
            )
        if len(np.unique(array)) != len(array):
            raise InvalidArgumentError(
                f"`rows` must be distinct (one step per row per call); got {array.tolist()}."
            )
        return array

    def write_leaves(
        self,
        leaves: list[np.ndarray],
        rows: np.ndarray | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """Writes already validated flat leaves (``recollect.validation.convert_step`` output).

        Leaves have leading dim ``num_envs`` (``len(rows)`` with ``rows``, distinct
        rows). No check is made: use :meth:`add_batch` for user input. Waits on
        the rate limiter as :meth:`add_batch` does.
        """
        if self._prepare is not None:
            leaves = self._prepare(leaves)
        is_last = None if self._is_last is None else leaves[self._is_last]
        table = self._table
        with table.lock:
            if (
                rows is None
                and self._plain_writes
                and table.write_all(self._storage, leaves, is_last)
            ):
                return  # the common case: every row at one clock, fewest checks
            if table.rate_limiter is not None:
                table.await_insert(self._num_envs if rows is None else len(rows), timeout)
            times, slots = table.next_steps(rows)  # scalars when every row shares one clock
            if self._persist is not None:
                self._persist.before_write(rows, times)
            self._storage.write(rows, slots, leaves, times=times)
            table.insert(rows, slots, is_last)

    def extend(self, steps: Any, rows: Any = None, *, timeout: float | None = None) -> None:
        """Appends ``T`` consecutive steps to every env row, or to the rows ``rows`` only.

        Equals ``T`` calls of :meth:`add_batch` with ``steps[:, t]`` (same
        stored data, ids, windows and later samples), validated as a whole
        before anything is written, and written with one numpy assignment per
        leaf for up to ``max_length`` steps at a time. Samplers that track each
        write without a block hook (``Sampler.on_add_block``; prioritized has one),
        frame-stack storage and rate-limited tables take the step-by-step path
        (each step waits on the limiter as :meth:`add_batch`, with ``timeout``).

        Args:
            steps: a nest matching the spec; every leaf ``[num_envs, T, *shape]``
                (``[len(rows), T, ...]`` with ``rows``), oldest step first.
            rows: None (every row) or distinct int row indices in ``[0, num_envs)``.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: as :meth:`add_batch`;
                nothing is written.
            InvalidArgumentError: bad ``rows``.
        """
        if rows is not None:
            rows = self._check_rows(rows)
        k = self._num_envs if rows is None else len(rows)
        values = check_structure(self._flat, steps, "extend")
        count = int(np.shape(values[0])[1]) if np.ndim(values[0]) >= 2 else -1
        if count < 0:
            raise ShapeError(
                f"extend needs leaves [num_envs or len(rows), T, *shape]; leaf "
                f"'{self._flat.paths[0]}' has shape {np.shape(values[0])}. Use add_batch for "
                "one step."
            )
        leaves = convert_step(self._flat, steps, (k, count), "extend")
        if not count:
            return
        table = self._table
        block = table.block_writes and table.rate_limiter is None
        if not (block and block_storage(self._storage)):
            for j in range(count):  # step by step: the sampler, storage or limiter follows
                self.write_leaves([leaf[:, j] for leaf in leaves], rows, timeout=timeout)
            return
        for start in range(0, count, self._max_length):  # chunks of at most one ring
            chunk = [leaf[:, start : start + self._max_length] for leaf in leaves]
            if self._prepare is not None:  # compressed leaves: compressed outside the lock
                chunk = self._prepare(chunk)
            self._write_block(chunk, rows)

    def _write_block(self, leaves: list[np.ndarray], rows: np.ndarray | None) -> None:
        count = leaves[0].shape[1]
        is_last = None if self._is_last is None else leaves[self._is_last]
        table = self._table
        with table.lock:
            t = table.index.t if rows is None else table.index.t[rows]
            times = t[:, None] + np.arange(count)
            slots = times % self._max_length
            if self._persist is not None:
                self._persist.before_write(rows, times[:, -1])
            self._storage.write(rows, slots, leaves, times=times)
            table.insert_block(rows, slots, count, is_last)

    @property
    def recovered_steps_dropped(self) -> int:
        """Steps a ``recover=True`` reopen dropped (0 when nothing was recovered)."""
        return 0 if self._persist is None else self._persist.steps_dropped

    def flush(self) -> None:
        """Memmap storage: writes data, clocks and sampler state to ``directory`` (else no-op)."""
        if self._persist is not None:
            self._persist.flush(self._storage, self._table, self._table.lock)

    def clear(self) -> None:
        """Forgets every stored step. Ids keep increasing (never reused)."""
        self._table.clear()

    def close(self) -> None:
        """Marks the buffer closed (and flushes memmap storage); idempotent.

        Readers streaming from it (``recollect.tf_data.as_dataset``,
        ``recollect.torch.ReplayDataset``, ``recollect.jax.as_iterator``) then end
        their iteration cleanly, and inserts and samples waiting on the rate
        limiter raise StateError. Stored data stays readable and writable.
        """
        self._closed = True
        self._table.close()
        self.flush()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- reading ----------------------------------------------------------
    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        *,
        within_episode: bool | None = None,
        timeout: float | None = None,
        **sampler_options: Any,
    ) -> Sample:
        """Draws ``batch_size`` windows of ``num_steps`` consecutive steps of one row.

        Args:
            batch_size: windows to draw (with replacement), >= 1.
            num_steps: window length; None gives one step per item and drops
                the time axis, or, when the buffer fixes ``sequence_length`` > 1,
                windows of that length with a time axis (as Reverb items).
            within_episode: override of episode-aware mode (default: on when
                the spec has ``is_last``).
            timeout: with a rate limiter, seconds to wait while it forbids the
                sample (None: forever, 0: never); ignored without one.
            **sampler_options: passed to the sampler (e.g. the prioritized
                sampler's ``importance_sampling_exponent``).

        Returns:
            :class:`Sample` with ``data`` leaves ``[batch_size, num_steps, *shape]``
            (``[batch_size, *shape]`` for ``num_steps=None``), ``ids`` int64,
            ``probabilities`` float64, ``priorities``, ``times_sampled``,
            ``table_size`` and (prioritized) ``weights`` float64.

        Raises:
            InvalidArgumentError: ``batch_size`` or ``num_steps`` < 1,
                ``num_steps`` > ``max_length``, or ``within_episode=True``
                without an ``is_last`` leaf.
            NotEnoughDataError: no valid window of that length is stored (no rate limiter).
            RateLimiterTimeout: the rate limiter still forbids it after ``timeout``.
            StateError: the buffer was closed while the sample waited.
        """
        with self._table.lock:
            draw = self._table.draw(
                batch_size,
                num_steps,
                within_episode=within_episode,
                timeout=timeout,
                **sampler_options,
            )
            return self.gather(draw)

    def gather(self, draw: Draw) -> Sample:
        """The :class:`Sample` of a :meth:`Table.draw <recollect.table.Table.draw>` of this
        buffer, gathered now.

        Without the lock held, a concurrent write may overwrite drawn steps
        meanwhile: check ``buf.table.is_stale(draw)`` afterwards and draw again
        when it is (the protocol the adapters use to gather outside the lock).
        """
        if draw.time_axis:
            rows, slots, times = draw.steps(self._max_length)
        else:
            rows, times = draw.rows, draw.times
            slots = times % self._max_length
        leaves = self._storage.gather(rows, slots, times=times)
        return Sample(
            self._flat.unflatten(leaves),
            draw.ids,
            draw.probabilities,
            draw.weights,
            draw.priorities,
            draw.times_sampled,
            draw.table_size,
        )

    def gather_stored(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps; use
                :meth:`gather_row` per row.
        """
        with self._table.lock:
            index = self._table.index
            lo, hi = index.lo, index.hi
            count = int(hi[0] - lo[0])
            if not ((hi - lo) == count).all():
                raise InvalidArgumentError(
                    f"rows hold different numbers of steps ({(hi - lo).tolist()}); gather them "
                    "one at a time with gather_row(row)."
                )
            times = lo[:, None] + np.arange(count)
            rows = np.broadcast_to(np.arange(self._num_envs)[:, None], times.shape)
            leaves = self._storage.gather(rows, times % self._max_length, times=times)
            return self._flat.unflatten([np.array(leaf) for leaf in leaves])

    def gather_row(self, row: int) -> Any:
        """All stored steps of env row ``row``: leaves ``[steps, *shape]``, oldest first."""
        with self._table.lock:
            index = self._table.index
            times = np.arange(index.lo[row], index.hi[row], dtype=np.int64)
            rows = np.full(len(times), row, np.int64)
            leaves = self._storage.gather(rows, times % self._max_length, times=times)
            return self._flat.unflatten([np.array(leaf) for leaf in leaves])

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets the priorities of the windows starting at ``ids`` (prioritized samplers).

        Returns:
            The number of ids skipped because their steps were overwritten.

        Raises:
            InvalidArgumentError: the sampler does not use priorities, or bad
                priorities (NaN, inf, negative, overflowing); nothing is changed.
        """
        return self._table.update_priorities(ids, priorities)

    def delete(self, ids: Any) -> int:
        """Deletes the windows starting at ``ids`` (Reverb: ``mutate_priorities`` deletes).

        A deleted window is never sampled again; ``info().size`` drops and
        ``info().deletes`` counts it; a rate limiter sees the smaller size (a
        delete can let an insert through and block a sample, as in Reverb). The
        steps stay stored (windows starting elsewhere may still contain them).

        Args:
            ids: int ``[K]`` window ids (``Sample.ids``, ``item_ids()``).

        Returns:
            The number of ids skipped, as :meth:`update_priorities` counts them:
            overwritten, not (yet) a complete window, of another shard, or
            deleted already.

        Raises:
            InvalidArgumentError: ``ids`` is not 1-D integers; nothing is deleted.
        """
        return self._table.delete(ids)

    def item_ids(self) -> np.ndarray:
        """Ids of all stored steps, int64 ``[num_envs, steps_per_row]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps.
        """
        with self._table.lock:
            index = self._table.index
            lo, hi = index.lo, index.hi
            count = int(hi[0] - lo[0])
            if not ((hi - lo) == count).all():
                raise InvalidArgumentError(
                    f"rows hold different numbers of steps ({(hi - lo).tolist()}); decode ids "
                    "per row with recollect.ids.encode(row, times)."
                )
            times = lo[:, None] + np.arange(count)
            return encode(np.arange(self._num_envs)[:, None], times, self._table.shard)

    def info(self) -> TableInfo:
        """Size, counters, rate limiter and sampler of the buffer's table (:class:`TableInfo`)."""
        return self._table.info(self._config["sampler"]["config"])

    # -- state ------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """JSON-able construction arguments (spec, geometry, sampler, frame stacks)."""
        return dict(self._config)

    def state_dict(self) -> dict[str, Any]:
        """``{"storage": ..., "table": ...}``: every array and value that restores the buffer.

        Storage arrays are the live arrays (no copies); hold :attr:`lock` while
        reading them if writers may run.
        """
        with self._table.lock:
            return {"storage": self._storage.state_dict(), "table": self._table.state_dict()}

    def load_state_dict(self, state: dict[str, Any], *, allow_map: bool = False) -> None:
        """Restores :meth:`state_dict` output of a buffer with the same :meth:`config`.

        Args:
            state: the state tree (arrays, or column sources of a checkpoint).
            allow_map: full saved ring columns may be memory-mapped copy-on-write.

        Raises:
            CheckpointError: the state does not fit this buffer.
        """
        with self._table.lock:
            table = dict(state["table"])
            index = dict(table["index"])
            rebuild = "end_rows" not in index
            if rebuild:
                index["end_rows"] = index["end_times"] = np.zeros(0, np.int64)
            table["index"] = index
            layout = state.get("layout")
            t = np.asarray(index["t"], np.int64)
            t_clear = np.asarray(index["t_clear"], np.int64)
            lo = np.maximum(t_clear, t - self._max_length)
            if layout is not None and dict(layout) != _layout(lo, t, self._max_length):
                raise CheckpointError(
                    f"clocks t={t.tolist()}, t_clear={t_clear.tolist()} do not match "
                    f"stored_steps={layout.get('stored_steps')}, "
                    f"slot_offset={layout.get('slot_offset')}."
                )
            self._table.load_state_dict(table)
            self._storage.load_state_dict(state["storage"], allow_map=allow_map)
            if rebuild and self._is_last is not None:
                self._rebuild_episode_ends()

    def _rebuild_episode_ends(self) -> None:
        """Episode ends from the stored ``is_last`` leaf (format-1 checkpoints)."""
        index = self._table.index
        counts = index.stored
        rows = np.repeat(np.arange(self._num_envs), counts)
        times = np.repeat(index.lo, counts) + (
            np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        )
        (flag,) = self._storage.gather(
            rows, times % self._max_length, times=times, leaf_ids=[self._is_last]
        )
        index.set_ends(rows[flag], times[flag])

    def save(self, path: str | os.PathLike) -> Any:
        """Writes a checkpoint directory, atomically (see :mod:`recollect.state.manifest`).

        Only the stored columns of the ring arrays are written when every row
        shares one stored range; otherwise whole rings. Writers are blocked
        while the buffer is saved.

        Returns:
            The absolute checkpoint path.

        Raises:
            CheckpointError: ``path`` is a non-empty directory that is not a checkpoint, or
                the checkpoint could not be loaded (see :meth:`check_saveable`).
            OSError: the disk is full or not writable (the old checkpoint stays).
        """
        self.check_saveable()
        with self._table.lock:
            return write_checkpoint(
                path, self.kind, self.config(), self.state_dict(), self.stored_layout()
            )

    def check_saveable(self) -> None:
        """Raises :class:`CheckpointError` when a checkpoint of this buffer could not be loaded
        (a structured-dtype leaf, a sampler that its registered name does not rebuild)."""
        check_saveable(self._flat, self._table.sampler, self._config["sampler"]["config"])

    def stored_layout(self) -> dict[str, int]:
        """``{"slot_offset", "stored_steps"}``: the ring columns a checkpoint writes."""
        index = self._table.index
        return _layout(index.lo, index.hi, self._max_length)

    @classmethod
    def from_config(cls, config: dict[str, Any], **kwargs: Any) -> Self:
        """An empty buffer built from :meth:`config` output (``kwargs`` override arguments).

        Raises:
            CheckpointError: the configuration is malformed or names an unknown sampler.
        """
        try:
            sampler_cls = registered_sampler(config["sampler"]["type"])
            sampler = sampler_cls(**config["sampler"]["config"])
            return cls(
                rebuild_spec(config["spec"]),
                config["capacity"],
                config["num_envs"],
                sampler=sampler,
                sequence_length=config.get("sequence_length"),
                frame_stacks=frame_stacks_from_config(config.get("frame_stacks")),
                shard=config.get("shard", 0),
                track_times_sampled=config.get("track_times_sampled", False),
                **{
                    "rate_limiter": rate_limiter_from_config(config.get("rate_limiter")),
                    "max_times_sampled": config.get("max_times_sampled", 0),
                    "compression": config.get("compression"),
                    **kwargs,
                },
            )
        except (CheckpointError, MemoryError):
            raise
        except (RecollectError, KeyError, TypeError) as err:
            raise CheckpointError(
                f"inconsistent buffer description ({err}); the manifest's config was edited or "
                "damaged. Restore it from a backup."
            ) from err

    @classmethod
    def from_saved(cls, saved: Saved, *, mmap: bool = False) -> Self:
        """Rebuilds a buffer from a state directory (:func:`recollect.state.files.read_state`).

        Raises:
            CheckpointError: another kind, a malformed configuration or state.
        """
        if saved.kind != cls.kind:
            raise CheckpointError(
                f"{saved.where}: holds a {saved.kind}, not a {cls.kind}; load it with "
                f"recollect.{saved.kind}.load."
            )
        state = saved.state
        if "layout" not in state and saved.manifest.get("layout") is not None:
            state = {**state, "layout": saved.manifest["layout"]}
        return _restore(cls, saved.config, state, saved.where, mmap)

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = False) -> Self:
        """Restores a buffer written by :meth:`save` (format 1 and 2).

        Args:
            path: the checkpoint directory.
            mmap: map full leaf files copy-on-write instead of reading them
                (the checkpoint files are never modified).

        Raises:
            CheckpointError: missing or damaged files, a newer format version,
                or a checkpoint of another buffer kind.
        """
        return load_consistent(path, lambda saved: cls.from_saved(saved, mmap=mmap))


def _layout(lo: np.ndarray, hi: np.ndarray, max_length: int) -> dict[str, int]:
    """Stored columns only when every row stores the same range of a partial ring; else all."""
    count = int(hi[0] - lo[0])
    if count < max_length and ((hi - lo) == count).all() and (lo == lo[0]).all():
        return {"slot_offset": int(lo[0]) % max_length, "stored_steps": count}
    return {"slot_offset": 0, "stored_steps": max_length}


def _restore(cls: Any, config: Any, state: Any, where: str, mmap: bool) -> Any:
    try:
        buffer = cls.from_config(config, force=mmap)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from err
    try:
        buffer.load_state_dict(state, allow_map=mmap)
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from err
    except (KeyError, TypeError, ValueError, RecollectError) as err:
        raise CheckpointError(
            f"{where}: cannot restore the buffer state ({err}); the checkpoint is damaged or "
            "was edited. Restore it from a backup or save the buffer again."
        ) from err
    return buffer


def _sampler_config(sampler: Sampler | None) -> dict[str, Any]:
    if sampler is None:
        return {}
    try:
        return json_safe(sampler.get_config())
    except RecollectError:
        return {}


def json_safe(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with numpy scalars as Python numbers (JSON-able)."""
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in config.items()}
