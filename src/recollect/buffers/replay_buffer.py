"""ReplayBuffer: a table (window index + sampler) over a storage, behind one facade.

This module builds the buffer and holds its properties and lifecycle; writes
(:mod:`.writes`), sampling (:mod:`.sampling`), checkpoints (:mod:`.buffer_state`)
come from mixins, stored reads from a :class:`.StoredReader` it holds; TF-Agents' ``get_next``
lives in :mod:`recollect.tf_agents.reads`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers.buffer_state import (
    BufferState,
    frame_stacks_config,
    json_safe,
    sampler_config,
)
from recollect.buffers.memmap_state import MemmapState
from recollect.buffers.sampling import BufferSampling
from recollect.buffers.source_reads import BufferSource
from recollect.buffers.stored_reads import StoredReader
from recollect.buffers.writes import BufferWrites
from recollect.buffers.wrong_class import OtherClassMethod
from recollect.errors import (
    InvalidArgumentError,
    SpecError,
)
from recollect.memory import check_memory, estimate_memory
from recollect.samplers.base import Sampler
from recollect.specs import FlatSpec
from recollect.state.manifest import describe_spec
from recollect.storage.base import Storage
from recollect.storage.factory import (
    bool_scalar,
    make_storage,
    resolve_compression,
)
from recollect.storage.frames.frame_store import resolve_frame_stacks
from recollect.storage.gather import Gatherer
from recollect.table import Table
from recollect.table.rate_limiters import RateLimiter
from recollect.table.table import RngLike

__all__ = ["ReplayBuffer", "RngLike"]


class ReplayBuffer(BufferWrites, BufferSampling, BufferState, BufferSource):
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
            ``recollect.storage.ZstdCodec(level=3)``. Samples are bit-exact.
            With ``storage="memmap"`` the compressed values live in block files
            of ``directory`` (:mod:`recollect.storage.compressed_memmap`). See
            :mod:`recollect.storage.compression.codecs` for measured sizes and speeds.
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
    #: TF-Agents' ``as_dataset`` is an adapter's: reading it names the call to make.
    as_dataset = OtherClassMethod(
        "ReplayBuffer has no as_dataset (a TF-Agents buffer method): use "
        "recollect.tf_data.as_dataset(buffer, sample_batch_size=..., num_steps=...) for a "
        "tf.data.Dataset, or recollect.tf_agents.TFUniformReplayBuffer for TF-Agents' API."
    )

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
            "sampler": {"type": self._table.sampler.name, "config": sampler_config(sampler)},
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
        self._stored = StoredReader(self._flat, self._table, self._storage)
        self._setup_writes(bool(codecs))
        if self._persist is not None:
            try:
                self._persist.attach(self._storage, self._table, self._table.lock, self)
            except BaseException:
                del self._storage  # unmap before the files are removed
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

    def gather_all(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps (rows
                written with ``add_batch(..., rows=...)``); use ``gather_row``.
        """
        return self._stored.gather_stored()

    def gather_row(self, row: int) -> Any:
        """All stored steps of env row ``row``: leaves ``[steps, *shape]``, oldest first."""
        return self._stored.gather_row(row)

    def item_ids(self) -> np.ndarray:
        """Ids of all stored steps, int64 ``[num_envs, steps_per_row]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps.
        """
        return self._stored.item_ids()
