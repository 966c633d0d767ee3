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

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, cast, overload

import numpy as np

from recollect.arguments import positive_int
from recollect.buffers.final_observations import FinalObservations
from recollect.buffers.replay_buffer import ReplayBuffer, RngLike
from recollect.buffers.source_reads import LocalSource
from recollect.buffers.transition_items import OtherClassMethod, TransitionSequence
from recollect.buffers.transition_reads import TransitionReads
from recollect.buffers.transition_sample import TransitionSample, transition_spec
from recollect.buffers.transition_state import TransitionState
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.samplers.prioritized import Prioritized
from recollect.specs import ArraySpec, FlatSpec, spec_from_example
from recollect.storage.frame_store import FrameStack
from recollect.table import Table
from recollect.validation import convert_step

__all__ = ["TransitionBuffer", "TransitionSample"]


class TransitionBuffer(TransitionReads, TransitionState, LocalSource, Sequence[tuple[Any, ...]]):
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

    kind: ClassVar[str] = "TransitionBuffer"
    #: Methods of other classes: reading them raises WrongClassError naming the right call.
    add_batch = OtherClassMethod()
    get_next = OtherClassMethod()

    def __init__(
        self,
        capacity: int,
        num_envs: int = 1,
        rng: RngLike = None,
        *,
        prioritized: Any = False,
        frame_stack: FrameStack | None = None,
        compression: dict[str, Any] | None = None,
    ) -> None:
        self._prioritized = _prioritized_sampler(prioritized)
        self._compression = compression
        if frame_stack is not None and not isinstance(frame_stack, FrameStack):
            raise InvalidArgumentError(
                f"`frame_stack` must be a recollect.FrameStack or None; got {frame_stack!r}."
            )
        self._frame_stack = frame_stack
        self._capacity = positive_int("capacity", capacity)
        self._num_envs = positive_int("num_envs", num_envs)
        if self._capacity < self._num_envs or self._capacity % self._num_envs:
            raise InvalidArgumentError(
                f"`capacity` must be a positive multiple of `num_envs`; got "
                f"capacity={capacity}, num_envs={num_envs}."
            )
        self._rng = rng
        self._buffer: ReplayBuffer | None = None
        self._sequence = TransitionSequence(self)

    # -- lazily built state ----------------------------------------------
    def _build(self, observation: Any, action: Any, reward: Any) -> None:
        lead = self._num_envs > 1

        def strip(x: Any) -> Any:
            spec = spec_from_example(x)
            if not lead:
                return spec
            import optree

            return optree.tree_map(lambda s: ArraySpec(s.shape[1:], s.dtype), spec)

        obs_spec = strip(observation)
        reward_spec = strip(reward)
        if isinstance(reward_spec, ArraySpec) and reward_spec.dtype.kind in "biu":
            # An int first reward (often 0) must not turn later float rewards into errors.
            reward_spec = ArraySpec(reward_spec.shape, np.float32)
        spec = {
            "observation": obs_spec,
            "action": strip(action),
            "reward": reward_spec,
            "terminated": ArraySpec((), np.bool_),
            "truncated": ArraySpec((), np.bool_),
        }
        stacks = None
        if self._frame_stack is not None:  # episode starts = chain breaks (set in add)
            spec["is_first"] = ArraySpec((), np.bool_)
            stacks = {"observation": self._frame_stack}
        sampler = self._prioritized
        buffer = ReplayBuffer(
            spec,
            self._capacity,
            self._num_envs,
            rng=self._rng,
            sampler=sampler,
            sequence_length=None if sampler is None else 1,
            frame_stacks=stacks,
            compression=self._compression,
        )
        self._attach(buffer, obs_spec)

    def _attach(self, buffer: ReplayBuffer, obs_spec: Any) -> None:
        """Sets up the per-env state around ``buffer`` (also used by checkpoint loading)."""
        self._obs_flat = FlatSpec(obs_spec)
        flat = buffer.flat_spec
        self._obs_leaf_ids = [
            i
            for i, p in enumerate(flat.paths)
            if p == "observation" or p.startswith("observation/")
        ]
        self._other_leaf_ids = [i for i in range(len(flat.paths)) if i not in self._obs_leaf_ids]
        self._first_id = flat.paths.index("is_first") if "is_first" in flat.paths else None
        self._pending = [
            np.zeros((self._num_envs, *s), d)
            for s, d in zip(self._obs_flat.shapes, self._obs_flat.dtypes, strict=True)
        ]
        self._has_pending = np.zeros(self._num_envs, bool)
        self._final_ref = np.full((self._num_envs, buffer.max_length), -1, np.int64)
        self._finals = FinalObservations(self._obs_flat, self._capacity + self._num_envs)
        self._buffer = buffer

    @property
    def replay_buffer(self) -> ReplayBuffer:
        """The underlying :class:`ReplayBuffer` (available after the first add)."""
        if self._buffer is None:
            raise NotEnoughDataError("the TransitionBuffer is empty; call add() first.")
        return self._buffer

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def nbytes(self) -> int:
        """Bytes allocated: step storage, final observations and per-env pending state."""
        if self._buffer is None:
            return 0
        pending = sum(p.nbytes for p in self._pending)
        return self._buffer.nbytes + self._finals.nbytes + pending + self._final_ref.nbytes

    def num_frames(self) -> int:
        """Transitions currently stored."""
        return 0 if self._buffer is None else self._buffer.num_frames()

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
        first = self._buffer is None
        if first:
            self._build(observation, action, reward)
        try:
            leaves, nxt = self._convert(
                observation, action, reward, next_observation, terminated, truncated
            )
        except Exception:
            if first:  # a rejected first add must not fix the inferred spec
                self._unbuild()
            raise
        buffer = self._buffer
        assert buffer is not None  # for type checkers; _build always sets it
        obs = [leaves[i] for i in self._obs_leaf_ids]
        with buffer.lock:
            chained = self._link_previous(obs)
            if self._first_id is not None:
                leaves[self._first_id] = ~chained
            t = self._clock()
            self._final_ref[:, t % buffer.max_length] = -1
            buffer.write_leaves(leaves)
            for pending, value in zip(self._pending, nxt, strict=True):
                pending[...] = value
            self._has_pending[:] = True

    def _unbuild(self) -> None:
        """Forgets the buffer a rejected first add built; its sampler is replaced by a copy."""
        self._buffer = None
        if self._prioritized is not None:
            self._prioritized = cast(Prioritized, self._prioritized.copy())

    def _convert(
        self,
        observation: Any,
        action: Any,
        reward: Any,
        next_observation: Any,
        terminated: Any,
        truncated: Any,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Validated leaves of the step and of ``next_observation`` (nothing is written)."""
        buffer = self._buffer
        assert buffer is not None  # for type checkers; _build always sets it
        lead = (self._num_envs,)
        if self._num_envs == 1:  # scalars get the env dim; anything else is checked below
            terminated = np.reshape(terminated, 1) if np.ndim(terminated) == 0 else terminated
            truncated = np.reshape(truncated, 1) if np.ndim(truncated) == 0 else truncated
        step = {
            "observation": observation,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": np.broadcast_to(truncated, lead) if np.ndim(truncated) == 0 else truncated,
        }
        if self._num_envs == 1:
            step = {
                k: v if k in ("terminated", "truncated") else _add_dim(v) for k, v in step.items()
            }
            next_observation = _add_dim(next_observation)
        if self._first_id is not None:
            step["is_first"] = np.zeros(lead, bool)  # set from the chain below
        leaves = convert_step(buffer.flat_spec, step, lead, "add")
        nxt = convert_step(self._obs_flat, next_observation, lead, "add next_observation")
        return leaves, nxt

    def _link_previous(self, obs: list[np.ndarray]) -> np.ndarray:
        """Keeps the previous next_observation of envs whose chain breaks now.

        Returns bool ``[num_envs]``: the envs whose observation continues the chain.
        """
        buffer = self._buffer
        assert buffer is not None
        chained = self._has_pending.copy()
        for current, pending in zip(obs, self._pending, strict=True):
            # Bitwise: NaN chains, and -0.0 does not chain to 0.0 (replayed exactly).
            chained &= (_row_bytes(current) == _row_bytes(pending)).all(axis=1)
        broken = np.flatnonzero(self._has_pending & ~chained)
        t = self._clock()
        prev_t = t - 1
        new_lo = max(int(buffer.table.cleared_before[0]), t + 1 - buffer.max_length)
        if len(broken) == 0 or prev_t < new_lo:
            return chained
        refs = self._finals.append([p[broken] for p in self._pending], prev_t, new_lo)
        self._final_ref[broken, prev_t % buffer.max_length] = refs
        return chained

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
        if self._buffer is None:
            return
        with self._buffer.lock:
            self._buffer.clear()
            self._finals.clear()

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets priorities of sampled transitions (prioritized buffers).

        Returns:
            Number of ids skipped because their transitions were overwritten.

        Raises:
            InvalidArgumentError: a uniform buffer, or NaN/inf/negative
                priorities (nothing is changed).
        """
        return self.replay_buffer.update_priorities(ids, priorities)

    def _clock(self) -> int:
        """The step time of the next add (every row shares one clock here)."""
        return int(self.replay_buffer.table.clocks[0])

    def clock(self) -> int:
        """Steps added per env so far: the step time of the next :meth:`add` (0 when empty)."""
        return 0 if self._buffer is None else self._clock()


def _prioritized_sampler(prioritized: Any) -> Prioritized | None:
    if isinstance(prioritized, Prioritized):
        return prioritized
    if prioritized is True:
        return Prioritized()
    if prioritized is False or prioritized is None:
        return None
    raise InvalidArgumentError(
        f"`prioritized` must be True, False or a recollect.Prioritized(...); got {prioritized!r}."
    )


def _row_bytes(x: np.ndarray) -> np.ndarray:
    """The bytes of each env row of ``x`` (``[num_envs, ...]``) as uint8 ``[num_envs, nbytes]``."""
    return np.ascontiguousarray(x).reshape(len(x), -1).view(np.uint8)


def _add_dim(tree: Any) -> Any:
    import optree

    return optree.tree_map(lambda x: np.asarray(x)[None], tree, none_is_leaf=False)
