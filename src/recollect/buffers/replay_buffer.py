"""ReplayBuffer: ring storage + a sampler + vectorized windowing."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from recollect.buffers.checkpointable import Checkpointable
from recollect.buffers.sample import BufferInfo, Sample
from recollect.errors import InvalidArgumentError, NotEnoughDataError, SpecError
from recollect.samplers.base import Sampler, WindowDraw
from recollect.samplers.uniform import Uniform
from recollect.specs import FlatSpec
from recollect.storage.factory import make_storage
from recollect.validation import convert_step
from recollect.windows import WindowIndex

__all__ = ["ReplayBuffer"]

RngLike = int | np.random.Generator | np.random.SeedSequence | None


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidArgumentError(f"`{name}` must be an int >= 1; got {name}={value!r}.")
    return int(value)


class ReplayBuffer(Checkpointable):
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
        force: allocate a RAM buffer even when it exceeds ``MemAvailable``.

    Raises:
        InvalidArgumentError: ``capacity`` < ``num_envs``, not a multiple of it,
            or a non-positive argument.
        SpecError: the spec is malformed, or ``is_last`` is not a bool scalar.
        InsufficientMemoryError: a RAM buffer larger than the available memory
            (see :func:`~recollect.estimate_memory`); use memmap or ``force=True``.
        CheckpointError: ``directory`` holds another buffer or unflushed writes.

    Example:
        >>> spec = {"observation": ArraySpec((4,), np.float32), "is_last": ArraySpec((), bool)}
        >>> buf = ReplayBuffer(spec, capacity=1000, num_envs=4, rng=0)
        >>> buf.add_batch({"observation": np.zeros((4, 4), np.float32),
        ...                "is_last": np.zeros(4, bool)})
        >>> buf.num_frames()
        4
    """

    _checkpoint_kind = "ReplayBuffer"

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
    ) -> None:
        capacity = _positive_int("capacity", capacity)
        num_envs = _positive_int("num_envs", num_envs)
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
        if sequence_length is not None:
            sequence_length = _positive_int("sequence_length", sequence_length)
            self._check_num_steps(sequence_length, "sequence_length")
        self._sequence_length = sequence_length
        self._is_last = self._find_is_last()
        self._rng = np.random.default_rng(rng)
        self._lock = threading.RLock()
        self._closed = False
        self._index = WindowIndex(num_envs, self._max_length)
        self._storage, self._persist = make_storage(self, storage, directory, frame_stacks, force)
        self._sampler = sampler if sampler is not None else Uniform()
        self._sampler.bind(self._index, sequence_length)
        if self._persist is not None:  # memmap: reopen the directory or write its manifest
            self._persist.attach(self)

    def _find_is_last(self) -> int | None:
        if "is_last" not in self._flat.paths:
            return None
        i = self._flat.index("is_last")
        leaf = self._flat.leaves[i]
        if leaf.shape != () or leaf.dtype != np.bool_:
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
    def episode_aware(self) -> bool:
        """Whether the spec has a top-level ``is_last`` leaf."""
        return self._is_last is not None

    @property
    def sampler(self) -> Sampler:
        """The sampler deciding which windows come back."""
        return self._sampler

    @property
    def rng(self) -> np.random.Generator:
        """The generator all sampling draws from."""
        return self._rng

    @property
    def nbytes(self) -> int:
        """Bytes allocated for stored steps."""
        return self._storage.nbytes

    def num_frames(self) -> int:
        """Steps currently stored, over all rows."""
        return self._num_envs * self._index.steps_per_row

    def __len__(self) -> int:
        return self.num_frames()

    def __repr__(self) -> str:
        return (
            f"ReplayBuffer(capacity={self._capacity}, num_envs={self._num_envs}, "
            f"stored={self.num_frames()}, leaves={self._flat.paths}, "
            f"sampler={type(self._sampler).__name__})"
        )

    # -- writing ----------------------------------------------------------
    def add(self, step: Any) -> None:
        """Appends one step (a nest matching the spec, no env dim); only when ``num_envs == 1``.

        Raises:
            InvalidArgumentError: the buffer has several env rows.
            SpecError, ShapeError, DTypeError, CastError: the step does not
                match the spec; nothing is written.
        """
        if self._num_envs != 1:
            raise InvalidArgumentError(
                f"`add` takes one step and works only when num_envs == 1; this buffer has "
                f"num_envs={self._num_envs}. Use add_batch with leaves of leading dim "
                f"{self._num_envs}."
            )
        leaves = convert_step(self._flat, step, (), "add")
        self._write([leaf[None] for leaf in leaves])

    def add_batch(self, steps: Any) -> None:
        """Appends one step to every env row; every leaf has leading dim ``num_envs``.

        Values are cast to the spec's dtype only when safe (``same_kind``, no
        value lost). The whole batch is validated before anything is written.

        Raises:
            SpecError: a leaf is missing or extra.
            ShapeError: a leaf's shape is not ``[num_envs, *leaf_shape]``.
            DTypeError: a dtype cannot be cast safely (e.g. float into an int leaf).
            CastError: a cast would lose values (out of range, overflow).
        """
        self._write(convert_step(self._flat, steps, (self._num_envs,), "add_batch"))

    def _write(self, leaves: list[np.ndarray]) -> None:
        is_last = None if self._is_last is None else leaves[self._is_last]
        with self._lock:
            self._storage.write_column(self._index.t % self._max_length, leaves)
            self._index.advance(is_last)
            self._sampler.on_add(is_last)

    def flush(self) -> None:
        """Memmap storage: writes data, counters and sampler state to ``directory`` (else no-op)."""
        if self._persist is not None:
            self._persist.flush(self)

    def clear(self) -> None:
        """Forgets every stored step. Ids keep increasing (never reused)."""
        with self._lock:
            self._index.clear()
            self._sampler.on_clear()

    def close(self) -> None:
        """Marks the buffer closed; idempotent.

        Readers streaming from it (``as_dataset``, ``recollect.torch.ReplayDataset``,
        ``recollect.jax.as_iterator``) then end their iteration cleanly. Stored
        data stays readable and writable; nothing is freed.
        """
        self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -- reading ----------------------------------------------------------
    def _check_num_steps(self, num_steps: int, name: str = "num_steps") -> None:
        if num_steps > self._max_length:
            raise InvalidArgumentError(
                f"`{name}` must be <= max_length (capacity // num_envs); got {name}="
                f"{num_steps}, max_length={self._max_length}. Increase capacity or "
                "shorten the window."
            )

    def _resolve_window(
        self, num_steps: int | None, within_episode: bool | None
    ) -> tuple[int, bool]:
        if num_steps is None:
            n = self._sequence_length or 1
        else:
            n = _positive_int("num_steps", num_steps)
            self._check_num_steps(n)
            fixed = self._sampler.sequence_length
            if fixed is not None and n != fixed:
                raise InvalidArgumentError(
                    f"this buffer's sampler scores windows of sequence_length={fixed}; got "
                    f"num_steps={n}. Sample with num_steps={fixed} or None."
                )
        if within_episode is None:
            within_episode = self._is_last is not None
        elif within_episode and self._is_last is None:
            raise InvalidArgumentError(
                "within_episode=True needs a top-level bool 'is_last' leaf in data_spec; "
                f"this spec has leaves {self._flat.paths}."
            )
        return n, bool(within_episode)

    def _not_enough_data(self, n: int, within_episode: bool) -> NotEnoughDataError:
        stored = self._index.steps_per_row
        if stored == 0:
            return NotEnoughDataError(
                "cannot sample from an empty buffer; add steps first (or wait for the collector)."
            )
        if within_episode:
            longest = self._index.longest_run()
            return NotEnoughDataError(
                f"no valid window of num_steps={n}: rows hold {stored} steps each and the "
                f"longest stored episode part has {longest} steps. Add more steps or sample "
                "shorter windows."
            )
        return NotEnoughDataError(
            f"no valid window of num_steps={n}: rows hold {stored} steps each. Add at least "
            f"{n - stored} more step(s) per row or sample shorter windows."
        )

    def sample(
        self,
        batch_size: int,
        num_steps: int | None = None,
        *,
        within_episode: bool | None = None,
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
            **sampler_options: passed to the sampler (e.g. the prioritized
                sampler's ``importance_sampling_exponent``).

        Returns:
            :class:`Sample` with ``data`` leaves ``[batch_size, num_steps, *shape]``
            (``[batch_size, *shape]`` for ``num_steps=None``), ``ids`` int64,
            ``probabilities`` float64 and (prioritized) ``weights`` float64.

        Raises:
            InvalidArgumentError: ``batch_size`` or ``num_steps`` < 1,
                ``num_steps`` > ``max_length``, or ``within_episode=True``
                without an ``is_last`` leaf.
            NotEnoughDataError: no valid window of that length is stored.
        """
        batch_size = _positive_int("batch_size", batch_size)
        n, within_episode = self._resolve_window(num_steps, within_episode)
        with self._lock:
            draw = self._draw(batch_size, n, within_episode, sampler_options)
            return self._sample_of(draw, n, num_steps)

    def _sample_of(self, draw: WindowDraw, n: int, num_steps: int | None) -> Sample:
        """The :class:`Sample` of drawn windows of ``n`` steps (gathered now).

        The time axis is kept when ``num_steps`` was given or the windows are
        longer than one step (a fixed ``sequence_length``).
        """
        leaves = self._gather(draw, n, time_axis=num_steps is not None or n > 1)
        ids = draw.times * self._num_envs + draw.rows
        return Sample(self._flat.unflatten(leaves), ids, draw.probabilities, draw.weights)

    def _draw(
        self, batch_size: int, n: int, within_episode: bool, options: dict[str, Any]
    ) -> WindowDraw:
        """Draws windows; the caller holds the lock."""
        if self._index.count(n, within_episode) == 0:
            raise self._not_enough_data(n, within_episode)
        return self._sampler.sample(batch_size, n, within_episode, self._rng, **options)

    def _gather(self, draw: WindowDraw, n: int, time_axis: bool) -> list[np.ndarray]:
        base = draw.rows * self._max_length
        if time_axis:
            slots = (draw.times[:, None] + np.arange(n)) % self._max_length
            flat_index = base[:, None] + slots
        else:
            flat_index = base + draw.times % self._max_length
        return self._storage.gather(flat_index)

    def get_next(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        time_stacked: bool = True,
    ) -> tuple[Any, BufferInfo]:
        """TF-Agents style sampling: returns ``(items, BufferInfo(ids, probabilities))``.

        ``sample_batch_size=None`` returns one window without a batch dim.
        ``time_stacked=False`` returns a tuple of ``num_steps`` nests instead of
        a time axis.

        Raises:
            Same as :meth:`sample`.
        """
        batch = 1 if sample_batch_size is None else sample_batch_size
        s = self.sample(batch, num_steps)
        items, ids, probs = s.data, s.ids, s.probabilities
        if sample_batch_size is None:
            items = _map(lambda x: x[0], items)
            ids, probs = ids[0], probs[0]
        if num_steps is not None and not time_stacked:
            axis = 0 if sample_batch_size is None else 1
            items = tuple(
                _map(lambda x, k=k: x.take(k, axis=axis), items) for k in range(num_steps)
            )
        return items, BufferInfo(ids, probs)

    def gather_all(self) -> Any:
        """All stored steps: leaves ``[num_envs, steps_per_row, *shape]``, oldest first."""
        with self._lock:
            slots = np.arange(self._index.lo, self._index.hi) % self._max_length
            return self._flat.unflatten(self._storage.read_rows(slots))

    # -- extensions implemented in their own modules ---------------------
    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets the priorities of the windows starting at ``ids`` (prioritized samplers).

        Returns:
            The number of ids skipped because their steps were overwritten.

        Raises:
            InvalidArgumentError: the sampler does not use priorities.
        """
        update = getattr(self._sampler, "update_priorities", None)
        if update is None:
            raise InvalidArgumentError(
                f"{type(self._sampler).__name__} sampling has no priorities; construct the "
                "buffer with sampler=recollect.Prioritized(...) to use update_priorities."
            )
        with self._lock:
            return update(ids, priorities)

    def as_dataset(
        self,
        sample_batch_size: int | None = None,
        num_steps: int | None = None,
        num_parallel_calls: int | None = None,
        single_deterministic_pass: bool = False,
    ) -> Any:
        """A ``tf.data.Dataset`` of ``(items, BufferInfo)`` (see :mod:`recollect.tf_data`)."""
        from recollect.tf_data import as_dataset

        return as_dataset(
            self,
            sample_batch_size=sample_batch_size,
            num_steps=num_steps,
            num_parallel_calls=num_parallel_calls,
            single_deterministic_pass=single_deterministic_pass,
        )

    def item_ids(self) -> np.ndarray:
        """Ids of all stored steps, int64 ``[num_envs, steps_per_row]``, oldest first."""
        with self._lock:
            times = np.arange(self._index.lo, self._index.hi, dtype=np.int64)
        return times[None, :] * self._num_envs + np.arange(self._num_envs)[:, None]


def _map(fn: Any, tree: Any) -> Any:
    import optree

    return optree.tree_map(fn, tree, none_is_leaf=False)
