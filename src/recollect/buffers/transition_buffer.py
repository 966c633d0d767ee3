"""TransitionBuffer: the beginner API of ``(s, a, r, s', terminated, truncated)`` tuples.

Built on :class:`~recollect.ReplayBuffer`. Each ``add`` stores one step
``(observation, action, reward, terminated, truncated)``. The
``next_observation`` is not stored again when the next ``add`` of that env
passes it back as its ``observation`` (the usual chained case): it is read
from the following step. Only when the chain breaks (episode end, reset, or
any other jump) is the previous ``next_observation`` kept, in a small
growable side ring of "final observations". So observations cost one copy per
step, and a sampled ``next_observation`` is always exactly what was passed.

It is also a read-only ``collections.abc.Sequence`` of the stored transitions, oldest
first, written with ``append((s, a, r, s2, done))`` as a ``deque(maxlen=N)`` replay
memory is (see :mod:`recollect.buffers.transition_items`), so that ``random.sample``,
``random.choices``, iteration and ``zip(*batch)`` work unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Self, cast, overload

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers import transition_items as items
from recollect.buffers.replay_buffer import ReplayBuffer, RngLike
from recollect.buffers.source_reads import stream_local
from recollect.buffers.transition_items import ItemForm, TransitionSequence
from recollect.buffers.transition_reads import TransitionReader
from recollect.buffers.transition_rows import first_rows
from recollect.buffers.transition_sample import TransitionSample, n_step_args, transition_spec
from recollect.buffers.transition_state import (
    KIND,
    checked_frame_stack,
    checked_storage,
    empty_state,
    prioritized_sampler,
    save_checkpoint,
    transition_config,
    transitions_from_saved,
)
from recollect.buffers.wrong_class import OtherClassMethod
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.samplers.prioritized import Prioritized
from recollect.state.files import Saved, load_consistent
from recollect.storage.frames.frame_store import FrameStack
from recollect.table import Table

__all__ = ["TransitionBuffer", "TransitionSample"]


class TransitionBuffer(Sequence[tuple[Any, ...]]):
    """Stores ``(observation, action, reward, next_observation, terminated, truncated)``.

    Args:
        capacity: transitions stored in total (a multiple of ``num_envs``).
        num_envs: parallel envs; with ``num_envs > 1`` every argument of
            :meth:`add` has a leading env dim.
        rng: seed or ``np.random.Generator`` for sampling.
        prioritized: False (uniform sampling), True (prioritized replay with
            :class:`~recollect.Prioritized` defaults) or a ``Prioritized(...)``
            instance; then ``sample`` returns importance ``weights`` and
            :meth:`update_priorities` sets priorities.
        frame_stack: a :class:`~recollect.FrameStack` when the observation is
            one array of stacked frames (gymnasium ``FrameStackObservation``):
            each step then stores only its newest frame, and ``observation``
            and ``next_observation`` stacks are rebuilt bit-exact (a step that
            does not continue the previous ``next_observation`` starts an
            episode, padded per ``frame_stack.padding``).
        compression: ``{leaf path: codec}`` of the stored step (``"observation"``,
            ...), as ``ReplayBuffer(compression=...)``: each observation (each
            frame, with ``frame_stack``) is kept compressed.
        storage, directory: ``"memmap"``: the steps in files of a new or empty ``directory``.

    The spec is inferred from the first :meth:`add` (observation and action
    may be nests; dtypes are kept as given, except that an integer or bool
    reward is stored as float32). Sampling is uniform over the stored
    transitions, or prioritized with ``prioritized=True``.

    As a sequence (``len(buf)``, ``buf[i]``, ``buf[-1]``, ``buf[a:b]``, iteration,
    ``random.sample(buf, k)``, ``random.choices(buf, k=k)``) it holds the stored
    transitions in insertion order, oldest first (with ``num_envs > 1``: by add,
    then env), each read back in the form :meth:`append` was given (a
    :class:`~recollect.buffers.transition_items.Transition` namedtuple when only
    :meth:`add` wrote it). Reading one transition gathers one slot per leaf, never
    the whole buffer.

    Example:
        >>> buf = TransitionBuffer(capacity=1000, rng=0)
        >>> buf.add(np.zeros(4, np.float32), 1, 1.0, np.ones(4, np.float32), False)
        >>> buf.sample(2).next_observation.shape
        (2, 4)
    """

    kind: ClassVar[str] = KIND
    #: A buffer in this process, never closed (:class:`~recollect.buffers.source.SampleSource`).
    remote = False
    closed = False
    #: Methods of other classes: reading them raises WrongClassError naming the right call.
    add_batch = OtherClassMethod(items.ADD_BATCH_INSTEAD)
    get_next = OtherClassMethod(items.GET_NEXT_INSTEAD)

    def __init__(
        self,
        capacity: int,
        num_envs: int = 1,
        rng: RngLike = None,
        *,
        prioritized: Any = False,
        frame_stack: FrameStack | None = None,
        compression: dict[str, Any] | None = None,
        storage: str = "numpy",
        directory: str | os.PathLike | None = None,
    ) -> None:
        self._prioritized = prioritized_sampler(prioritized)
        self._compression = compression
        self._storage = checked_storage(storage, directory)
        self._frame_stack = checked_frame_stack(frame_stack)
        self._capacity = positive_int("capacity", capacity)
        self._num_envs = positive_int("num_envs", num_envs)
        if self._capacity < self._num_envs or self._capacity % self._num_envs:
            raise InvalidArgumentError(
                f"`capacity` must be a positive multiple of `num_envs`; got "
                f"capacity={capacity}, num_envs={num_envs}."
            )
        self._rng = rng
        self._reader: TransitionReader | None = None
        self._sequence = TransitionSequence(self)

    def _read(self) -> TransitionReader:
        """The reader of the stored transitions; NotEnoughDataError before the first add."""
        if self._reader is None:
            raise NotEnoughDataError("the TransitionBuffer is empty; call add() first.")
        return self._reader

    @property
    def reader(self) -> TransitionReader | None:
        """The reader of the stored transitions (None before the first add)."""
        return self._reader

    @property
    def replay_buffer(self) -> ReplayBuffer:
        """The underlying :class:`ReplayBuffer` (available after the first add)."""
        return self._read().replay_buffer

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def nbytes(self) -> int:
        """Bytes allocated: step storage, final observations and per-env pending state."""
        return 0 if self._reader is None else self._reader.nbytes

    def num_frames(self) -> int:
        """Transitions currently stored."""
        reader = self._reader
        return 0 if reader is None else reader.replay_buffer.num_frames()

    def __len__(self) -> int:
        return self.num_frames()

    def __repr__(self) -> str:
        sampler = "Prioritized" if self._prioritized is not None else "Uniform"
        stack = None if self._frame_stack is None else self._frame_stack.stack_size
        return (
            f"TransitionBuffer(capacity={self._capacity}, num_envs={self._num_envs}, "
            f"stored={self.num_frames()}, sampler={sampler}, frame_stack={stack})"
        )

    # -- writing ----------------------------------------------------------
    def add(
        self,
        observation: Any,
        action: Any,
        reward: Any,
        next_observation: Any,
        terminated: Any,
        truncated: Any = False,
    ) -> None:
        """Stores one transition per env.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: an argument does not
                match the spec inferred from the first call; nothing is written.
        """
        reader = self._reader
        first = reader is None
        if reader is None:
            reader = self._reader = TransitionReader.build(
                (observation, action, reward),
                self._capacity,
                self._num_envs,
                rng=self._rng,
                sampler=self._prioritized,
                frame_stack=self._frame_stack,
                options={"compression": self._compression, **self._storage},
            )
        try:
            leaves, nxt = reader.convert(
                observation, action, reward, next_observation, terminated, truncated
            )
        except Exception:
            if first:  # a rejected first add must not fix the inferred spec (nor its sampler)
                self._reader = None
                if self._prioritized is not None:
                    self._prioritized = cast(Prioritized, self._prioritized.copy())
            raise
        with reader.replay_buffer.writer.lock:
            reader.write(leaves, nxt)

    def add_batched(self, *transition: Any) -> None:
        """:meth:`add` of ``(observation, action, reward, next_observation, terminated,
        truncated)`` that all have the leading env dim, ``num_envs == 1`` too (SB3's form);
        values of the stored dtypes and shapes are written as they are, on this thread.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: as :meth:`add`; nothing is written.
        """
        reader = self._reader
        if reader is None:  # the first add infers the spec (from row 0 at one env)
            one = self._num_envs == 1 and len(transition) >= 4
            self.add(*(first_rows(transition[:4]) + transition[4:] if one else transition))
        else:
            reader.add_batched(*transition)

    def append(self, transition: tuple[Any, ...]) -> None:
        """Stores one transition given as a tuple, as ``deque.append`` would.

        ``transition`` is a tuple or namedtuple in :meth:`add`'s order:
        ``(observation, action, reward, next_observation, done)`` (``done`` is
        stored as ``terminated``), ``(..., terminated, truncated)``, or
        ``(observation, action, reward, next_observation)`` for a transition
        type without a done field (stored as not terminated). Its form (plain
        tuple or namedtuple class, and length) is how ``buf[i]`` reads stored
        transitions back; every append must use the form of the first one.

        Raises:
            InvalidArgumentTypeError: not a tuple.
            InvalidArgumentError: not 4, 5 or 6 fields, a namedtuple whose field
                names are in another order (``next_state`` before ``reward``), or
                another form than the first append's.
            SpecError, ShapeError, DTypeError, CastError: as :meth:`add`; nothing
                is written.
        """
        self._sequence.append(transition)

    @overload
    def __getitem__(self, index: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[Any, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[Any, ...] | list[tuple[Any, ...]]:
        """The stored transition at ``index`` (oldest first; negative from the newest), or a
        list of them for a slice; values are numpy arrays (numpy scalars for scalar
        leaves) in the form :meth:`append` was given.

        Raises:
            IndexError: ``index`` outside ``[-len(buf), len(buf))``.
            InvalidArgumentTypeError: ``index`` is neither an int nor a slice.
        """
        return self._sequence.get(index)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """The transitions stored when iteration starts, oldest first, read a chunk at a time.

        Transitions added meanwhile are not included.

        Raises:
            StateError: a transition not yet reached was overwritten or cleared meanwhile.
        """
        return self._sequence.iterate()

    # -- SampleSource: a sample's ``data`` is the dict of TransitionSample's fields --------
    @property
    def data_spec(self) -> dict[str, Any]:
        """The spec of one sampled transition: ``{"observation", "action", "reward",
        "next_observation", "terminated", "truncated"}`` (readers such as
        ``recollect.tf_data.as_dataset`` read a sample's ``data`` by it).

        Raises:
            NotEnoughDataError: nothing was added yet (the spec comes from the first add).
        """
        return transition_spec(self.replay_buffer.data_spec)

    @property
    def table(self) -> Table:
        """The inner buffer's table (its ``generation`` tells readers of writes)."""
        return self.replay_buffer.table

    def time_steps(self, num_steps: int | None) -> int | None:
        """None: a transition sample has no time axis.

        Raises:
            InvalidArgumentError: ``num_steps`` is not None.
        """
        if num_steps is not None:
            raise InvalidArgumentError(
                f"a TransitionBuffer samples single transitions: num_steps must be None; got "
                f"num_steps={num_steps}. Use sample(batch_size, n_step=..., discount=...) for "
                "n-step returns, or a recollect.ReplayBuffer for windows of steps."
            )
        return None

    def clear(self) -> None:
        """Forgets every transition. An add whose observation continues the last
        ``next_observation`` still continues its chain (a frame stack keeps its history
        frames, so it comes back exactly as passed); any other starts a new one."""
        if self._reader is not None:
            self._reader.clear()

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets priorities of sampled transitions (prioritized buffers).

        Returns:
            Number of ids skipped because their transitions were overwritten.

        Raises:
            InvalidArgumentError: a uniform buffer, or NaN/inf/negative
                priorities (nothing is changed).
        """
        return self.replay_buffer.update_priorities(ids, priorities)

    def clock(self) -> int:
        """Steps added per env so far: the step time of the next :meth:`add` (0 when empty)."""
        return 0 if self._reader is None else self._reader.clock()

    # -- reading ----------------------------------------------------------
    def sample(
        self,
        batch_size: int,
        *,
        n_step: int | None = None,
        discount: float | None = None,
        importance_sampling_exponent: float | None = None,
    ) -> TransitionSample:
        """Draws ``batch_size`` transitions (with replacement): uniformly, or by priority.

        Args:
            batch_size: transitions to draw, >= 1.
            n_step: n-step transitions (needs ``discount``): ``reward`` is the
                discounted sum of up to ``n_step`` rewards, cut at the episode
                end (terminated, truncated or a broken observation chain) and
                at the newest stored transition; ``next_observation``,
                ``terminated`` and ``truncated`` are those of the last summed
                transition and ``discount`` is ``gamma^k`` for the ``k``
                rewards summed. See :mod:`recollect.buffers.nstep_transitions`.
            discount: ``gamma`` in ``[0, 1]``; alone it means ``n_step=1``.
            importance_sampling_exponent: ``beta`` of prioritized buffers
                (default: the sampler's).

        Returns:
            :class:`TransitionSample`, every field ``[batch_size, ...]``;
            ``weights`` when prioritized, ``discount`` when n-step.

        Raises:
            InvalidArgumentError: ``batch_size``/``n_step`` < 1, ``n_step``
                without ``discount``, a discount outside ``[0, 1]``, or
                ``importance_sampling_exponent`` on a uniform buffer.
            NotEnoughDataError: the buffer is empty.
        """
        batch_size = positive_int("batch_size", batch_size)
        n, gamma = n_step_args(n_step, discount)
        return self._read().sample(batch_size, n, gamma, importance_sampling_exponent)

    def sample_at(
        self,
        rows: Any,
        times: Any,
        *,
        n_step: int | None = None,
        discount: float | None = None,
        importance_sampling_exponent: float | None = None,
    ) -> TransitionSample:
        """The transitions stored at step ``times`` of env ``rows`` (int ``[B]`` each), as
        :meth:`sample` returns them (``probabilities`` and ``weights`` of 1).

        For callers that choose the transitions themselves (SB3's ``_get_samples``).
        ``importance_sampling_exponent`` is accepted and ignored.

        Raises:
            InvalidArgumentError: rows or times of another shape, a row out of
                range, a step that is not stored, or bad ``n_step``/``discount``.
        """
        del importance_sampling_exponent
        n, gamma = n_step_args(n_step, discount)
        return self._read().sample_at(rows, times, n, gamma)

    def item_at(self, row: int, time: int) -> tuple[Any, ...] | None:
        """The transition of env ``row`` stored at step ``time`` as the values
        ``(observation, action, reward, next_observation, terminated, truncated)`` (copies),
        read without a gather (``buf[i]``'s path); None with frame stacks or compressed
        leaves (then use :meth:`sample_at`). ``(row, time)`` must be stored (no check);
        hold ``replay_buffer.writer.lock`` while other threads add."""
        return self._read().item_at(row, time)

    def chain_breaks(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Bool, shape of ``rows``: whether the step at ``(rows, slots)`` keeps its own
        next observation (its episode or observation chain ends there).

        Raises:
            NotEnoughDataError: nothing was added yet.
        """
        return self._read().chain_breaks(rows, slots)

    def next_observations(
        self, rows: np.ndarray, times: np.ndarray, out: list[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Next observation leaves of steps ``(rows, times)`` (``[B, ...]`` each).

        ``out``: the observations of the following steps, if already gathered.
        The caller holds the buffer lock.

        Raises:
            NotEnoughDataError: nothing was added yet.
        """
        return self._read().next_observations(rows, times, out)

    def draw(self, batch_size: int, num_steps: int | None) -> Callable[[], TransitionSample]:
        """Samples now (``sample(batch_size)``); returns ``finish()``, which returns the sample.

        Raises:
            InvalidArgumentError: ``num_steps`` is not None, or as :meth:`sample`.
            NotEnoughDataError: the buffer is empty.
        """
        self.time_steps(num_steps)
        s = self.sample(batch_size)
        return lambda: s

    stream = stream_local

    # -- checkpoints (:mod:`recollect.buffers.transition_state`) ----------
    def config(self) -> dict[str, Any]:
        """JSON-able construction arguments (and the inner buffer's, once built)."""
        return transition_config(
            self._capacity,
            self._num_envs,
            self._prioritized,
            self._frame_stack,
            self._compression,
            self._reader,
            self._sequence.form,
        )

    def state_dict(self) -> dict[str, Any]:
        """The inner buffer's state plus the observation chains (``final_ref`` ring columns,
        pending next observations, the live final observations)."""
        reader = self._reader
        if reader is None:
            return empty_state(self._rng)
        return {"replay": reader.replay_buffer.state_dict(), "chain": reader.chain_state()}

    def restore(
        self, buffer: ReplayBuffer, chain: dict[str, Any], *, item_form: ItemForm | None = None
    ) -> None:
        """Adopts a restored inner ``buffer`` and the saved observation ``chain`` state
        (``state_dict()["chain"]``); used when loading a checkpoint. ``item_form``: the
        form of the first :meth:`append` (``config()["item_form"]``), if any.

        Raises:
            CheckpointError: the chain state does not match the buffer's spec.
        """
        if isinstance(buffer.reader.sampler, Prioritized):
            self._prioritized = buffer.reader.sampler
        self._reader = TransitionReader.restored(buffer, chain, self._num_envs, self._capacity)
        self._sequence.form = item_form

    def save(self, path: str | os.PathLike) -> Any:
        """Writes a checkpoint directory, atomically (see :meth:`ReplayBuffer.save`).

        Returns:
            The absolute checkpoint path.
        """
        return save_checkpoint(path, self.config(), self._reader, self.state_dict)

    @classmethod
    def from_saved(cls, saved: Saved, *, mmap: bool = False) -> Self:
        """Rebuilds a TransitionBuffer from a state directory.

        Raises:
            CheckpointError: another kind, or a malformed configuration or state.
        """
        return transitions_from_saved(cls, saved, mmap=mmap)

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = False) -> Self:
        """Restores a TransitionBuffer written by :meth:`save` (format 1 and 2).

        Raises:
            CheckpointError: missing or damaged files, a newer format version,
                or a checkpoint of another kind.
        """
        return load_consistent(path, lambda saved: cls.from_saved(saved, mmap=mmap))
