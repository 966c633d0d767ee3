"""ReplayBuffer: a table (window index + sampler) over a storage, behind one thin front.

This module builds the buffer and its collaborators, over its one
:class:`~recollect.table.Table` and storage: ``writer``
(:class:`~recollect.buffers.writes.BufferWriter`, every write), ``reader``
(:class:`~recollect.buffers.sampling.BufferReader`, the buffer's
:class:`~recollect.buffers.source.SampleSource`) and ``persistence``
(:class:`~recollect.buffers.buffer_state.BufferPersistence`: state, checkpoints, memmap
flushes). Names that moved to a collaborator still resolve on the buffer, with a
DeprecationWarning (:data:`~recollect.buffers.wrong_class.MOVED`). TF-Agents' ``get_next``
lives in :mod:`recollect.tf_agents.reads`.
"""

from __future__ import annotations

import os
from typing import Any, Self

from recollect.arguments import positive_int
from recollect.buffers.buffer_state import (
    BufferPersistence,
    buffer_config,
    build_from_config,
    restore_saved,
)
from recollect.buffers.memmap_state import MemmapState
from recollect.buffers.sample import Sample
from recollect.buffers.sampling import BufferReader
from recollect.buffers.writes import BufferWriter
from recollect.buffers.wrong_class import OtherClassMethod, moved_name
from recollect.errors import InvalidArgumentError
from recollect.memory import check_memory, estimate_memory
from recollect.samplers.base import Sampler
from recollect.specs import FlatSpec
from recollect.state.files import Saved, load_consistent
from recollect.storage.base import Storage
from recollect.storage.episode_ends import episode_end_config, resolve_episode_end
from recollect.storage.factory import make_storage, resolve_compression
from recollect.storage.frames.frame_store import resolve_frame_stacks
from recollect.storage.gather import Gatherer
from recollect.table import Table, TableInfo
from recollect.table.rate_limiters import RateLimiter
from recollect.table.table import RngLike

__all__ = ["ReplayBuffer", "RngLike", "buffer_from_saved"]


class ReplayBuffer:
    """A replay buffer of ``num_envs`` rows, each a ring of ``capacity // num_envs`` steps.

    ``add_batch`` appends one step to every row; ``sample`` draws windows of
    ``num_steps`` consecutive steps of one row. Storage is preallocated, one
    contiguous ``[num_envs, max_length, *leaf_shape]`` array per spec leaf.

    Episode-aware mode (RLDS convention): when the spec has a top-level bool ``is_last``
    leaf (or ``episode_end`` names another), a window may end on an episode's last step
    but never contain one before its last step. Without it, windows respect only the
    stored range (TF-Agents behaviour). Windows never span a ring's write position.

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
            a ``UserWarning``; ``persistence.recovered_steps_dropped`` says how many steps
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
        episode_end: the steps that end an episode (in :meth:`config`): None, those whose
            top-level bool ``is_last`` is True; False, none; a path, those whose bool leaf
            there is True; ``(path, value)``, those whose int leaf there equals ``value``
            (``("step_type", 2)``: TF-Agents ``Trajectory`` steps, as Reverb's observer).

    Raises:
        InvalidArgumentError: ``capacity`` < ``num_envs``, not a multiple of it,
            or a non-positive argument; a sampler already serving another buffer.
        SpecError: the spec is malformed, or ``is_last`` is not a bool scalar.
        SpecError, DTypeError, InvalidArgumentError: a bad or compressed ``episode_end``.
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

    Attributes:
        writer: the :class:`~recollect.buffers.writes.BufferWriter`: every write
            (``write_leaves`` of validated flat leaves, ``lock``, ``flat_spec``,
            ``max_length``, ``episode_aware``).
        reader: the :class:`~recollect.buffers.sampling.BufferReader`, the
            :class:`~recollect.buffers.source.SampleSource` adapters read (``draw``,
            ``gather``, ``stream``, ``time_steps``, ``sampler``, ``rng``,
            ``sequence_length``, ``item_ids``, ``gather_row``, ``steps_per_row``).
        persistence: the :class:`~recollect.buffers.buffer_state.BufferPersistence`
            (``check_saveable``, ``stored_layout``, ``recovered_steps_dropped``,
            ``from_saved``).
        table: the :class:`~recollect.table.Table` (window index, sampler, RNG, lock).
        storage: the :class:`~recollect.storage.base.Storage` holding the stored bytes.
    """

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
        episode_end: str | tuple[str, Any] | bool | None = None,
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
        end = resolve_episode_end(self._flat, episode_end)
        resolve_frame_stacks(self._flat, frame_stacks)  # validates before anything is built
        codecs = resolve_compression(self._flat, compression, storage, end)
        self._table = self.table = Table(
            num_envs,
            self._max_length,
            sampler=sampler,
            sequence_length=sequence_length,
            episode_aware=end is not None,
            rng=rng,
            shard=shard,
            leaf_paths=self._flat.paths,
            track_times_sampled=track_times_sampled,
            rate_limiter=rate_limiter,
            max_times_sampled=max_times_sampled,
        )
        self._config: dict[str, Any] = buffer_config(
            self._flat,
            self._table,
            frame_stacks,
            sampler,
            rate_limiter,
            codecs,
            track_times_sampled,
            episode_end_config(episode_end, end),
        )
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
                episode_end=end,
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
        self.storage: Storage = self._storage
        parts = (self._flat, self._table, self._storage)
        self.writer: BufferWriter = BufferWriter(
            *parts, self._persist, compressed=bool(codecs), episode_end=end or False
        )
        self.reader: BufferReader = BufferReader(*parts)
        self.persistence: BufferPersistence = BufferPersistence(
            *parts, self._config, self._persist, type(self), episode_end=end or False
        )
        # the hot paths, bound once: ``buf.add_batch`` finds the writer's bound method in the
        # instance dict (it wins over the class's function of the same name and signature,
        # kept for docs and typing), so a call costs no extra frame; the class's methods
        # delegate the same way for anyone calling ``ReplayBuffer.add_batch(buf, ...)``
        vars(self).update(
            add=self.writer.add, add_batch=self.writer.add_batch, sample=self.reader.sample
        )
        if self._persist is not None:
            try:
                self._persist.attach(self._storage, self._table, self._table.lock, self)
            except BaseException:
                persist = self._persist
                vars(self).clear()  # unmap first: drop every reference to the storage
                persist.discard_created()
                raise

    # -- writes ---------------------------------------------------------------
    def add(self, step: Any, *transition: Any, timeout: float | None = None) -> None:
        """Appends one step (a nest matching the spec, no env dim); only when ``num_envs == 1``.

        See :meth:`BufferWriter.add <recollect.buffers.writes.BufferWriter.add>` (arguments
        and errors).
        """
        self.writer.add(step, *transition, timeout=timeout)

    def add_batch(self, steps: Any, rows: Any = None, *, timeout: float | None = None) -> None:
        """Appends one step to every env row, or to the env rows ``rows`` only.

        ``steps``: a nest matching the spec, every leaf with leading dim ``num_envs``
        (``len(rows)`` with ``rows``, distinct row indices); each row has its own clock.
        Values are cast only when safe; the whole batch is validated before anything is
        written. ``timeout``: seconds to wait on the rate limiter (None: forever, 0: never).
        Errors (SpecError, ShapeError, DTypeError, CastError, InvalidArgumentError,
        RateLimiterTimeout, StateError) in full: :meth:`BufferWriter.add_batch
        <recollect.buffers.writes.BufferWriter.add_batch>`.
        """
        self.writer.add_batch(steps, rows, timeout=timeout)

    def extend(self, steps: Any, rows: Any = None, *, timeout: float | None = None) -> None:
        """Appends ``T`` consecutive steps to every env row, or to the rows ``rows`` only
        (leaves ``[num_envs, T, *shape]``); equals ``T`` calls of :meth:`add_batch`.

        See :meth:`BufferWriter.extend <recollect.buffers.writes.BufferWriter.extend>`
        (arguments and errors).
        """
        self.writer.extend(steps, rows, timeout=timeout)

    # -- sampling ---------------------------------------------------------------
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

        ``num_steps=None`` gives one step per item and no time axis (or, when the buffer
        fixes ``sequence_length`` > 1, windows of that length); ``within_episode``
        overrides episode-aware mode; ``timeout``: seconds to wait on the rate limiter
        (None: forever, 0: never); ``sampler_options`` go to the sampler. Returns a
        :class:`Sample` (``data`` leaves ``[batch_size, num_steps, *shape]``, ``ids``
        int64, ``probabilities`` float64, ...). Arguments, fields and errors
        (InvalidArgumentError, NotEnoughDataError, RateLimiterTimeout, StateError) in
        full: :meth:`BufferReader.sample <recollect.buffers.sampling.BufferReader.sample>`.
        """
        return self.reader.sample(
            batch_size, num_steps, within_episode=within_episode, timeout=timeout, **sampler_options
        )

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
        """Deletes the windows starting at ``ids`` (int ``[K]``: ``Sample.ids``,
        ``reader.item_ids()``); Reverb's ``mutate_priorities`` deletes.

        A deleted window is never sampled again; ``info().size`` drops, ``info().deletes``
        counts it, a rate limiter sees the smaller size. The steps stay stored. Returns the
        number of ids skipped (overwritten, not a complete window, of another shard, or
        deleted already).

        Raises:
            InvalidArgumentError: ``ids`` is not 1-D integers; nothing is deleted.
        """
        return self._table.delete(ids)

    def info(self) -> TableInfo:
        """Size, counters, rate limiter and sampler of the buffer's table (:class:`TableInfo`)."""
        return self._table.info(self._config["sampler"]["config"])

    # -- state ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """JSON-able construction arguments (spec, geometry, sampler, frame stacks)."""
        return self.persistence.config()

    def state_dict(self) -> dict[str, Any]:
        """``{"storage": ..., "table": ...}``: every array and value that restores the buffer.

        Storage arrays are the live arrays (no copies); hold ``table.lock`` while
        reading them if writers may run.
        """
        return self.persistence.state_dict()

    def load_state_dict(self, state: dict[str, Any], *, allow_map: bool = False) -> None:
        """Restores :meth:`state_dict` output of a buffer with the same :meth:`config`
        (``allow_map``: full saved ring columns may be memory-mapped copy-on-write).

        Raises:
            CheckpointError: the state does not fit this buffer.
        """
        self.persistence.load_state_dict(state, allow_map=allow_map)

    def save(self, path: str | os.PathLike) -> Any:
        """Writes a checkpoint directory, atomically (see :mod:`recollect.state.manifest`);
        returns its absolute path. Writers are blocked while the buffer is saved.

        Raises:
            CheckpointError: ``path`` is a non-empty directory that is not a checkpoint, or
                the checkpoint could not be loaded (see ``persistence.check_saveable``).
            OSError: the disk is full or not writable (the old checkpoint stays).
        """
        return self.persistence.save(path)

    @classmethod
    def from_config(cls, config: dict[str, Any], **kwargs: Any) -> Self:
        """An empty buffer built from :meth:`config` output (``kwargs`` override arguments).

        Raises:
            CheckpointError: the configuration is malformed or names an unknown sampler.
        """
        return build_from_config(cls, config, **kwargs)

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
        return load_consistent(path, lambda saved: restore_saved(cls, saved, mmap=mmap))

    def flush(self) -> None:
        """Memmap storage: writes data, clocks and sampler state to ``directory`` (else no-op)."""
        self.persistence.flush()

    # -- properties -------------------------------------------------------------
    @property
    def data_spec(self) -> Any:
        """The spec of one step (a nest of :class:`~recollect.ArraySpec`)."""
        return self._flat.spec

    @property
    def capacity(self) -> int:
        """Total steps the buffer holds across rows."""
        return self._capacity

    @property
    def num_envs(self) -> int:
        """Number of env rows (each holds ``writer.max_length`` steps)."""
        return self._num_envs

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

    def gather_all(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first.

        Raises:
            InvalidArgumentError: rows hold different numbers of steps (rows
                written with ``add_batch(..., rows=...)``); use ``reader.gather_row``.
        """
        return self.reader.gather_all()

    def __len__(self) -> int:
        return self.num_frames()

    def __repr__(self) -> str:
        return (
            f"ReplayBuffer(capacity={self._capacity}, num_envs={self._num_envs}, "
            f"stored={self.num_frames()}, leaves={self._flat.paths}, "
            f"sampler={type(self._table.sampler).__name__})"
        )

    # -- lifecycle --------------------------------------------------------------
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
        self._table.close()
        self.persistence.flush()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._table.closed


# set after the class body, so that type checkers still report the moved names (mypy then
# finds every caller of an old path)
setattr(ReplayBuffer, "__getattr__", moved_name)  # noqa: B010


def buffer_from_saved(saved: Saved, *, mmap: bool = False) -> ReplayBuffer:
    """Rebuilds a :class:`ReplayBuffer` from a state directory
    (:func:`recollect.state.files.read_state`); ``buffer.persistence.from_saved`` builds one
    of the buffer's own class.

    Raises:
        CheckpointError: another kind, a malformed configuration or state.
    """
    return restore_saved(ReplayBuffer, saved, mmap=mmap)
