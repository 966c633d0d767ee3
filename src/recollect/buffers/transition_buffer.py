"""TransitionBuffer: the beginner API of ``(s, a, r, s', terminated, truncated)`` tuples.

Built on :class:`~recollect.ReplayBuffer`. Each ``add`` stores one step
``(observation, action, reward, terminated, truncated)``. The
``next_observation`` is not stored again when the next ``add`` of that env
passes it back as its ``observation`` (the usual chained case): it is read
from the following step. Only when the chain breaks (episode end, reset, or
any other jump) is the previous ``next_observation`` kept, in a small
growable side ring of "final observations". So observations cost one copy per
step, and a sampled ``next_observation`` is always exactly what was passed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any, ClassVar, Self

import numpy as np

from recollect import ids as id_layout
from recollect.buffers.final_observations import FinalObservations
from recollect.buffers.nstep_transitions import n_step_fields
from recollect.buffers.replay_buffer import ReplayBuffer, RngLike
from recollect.buffers.sample import nest_repr
from recollect.errors import CheckpointError, InvalidArgumentError, NotEnoughDataError
from recollect.nstep import check_discount
from recollect.samplers.prioritized import Prioritized
from recollect.specs import ArraySpec, FlatSpec, spec_from_example
from recollect.state.files import Saved, load_consistent, write_checkpoint
from recollect.state.rng import decode_rng, encode_rng
from recollect.storage.codecs import json_compression
from recollect.storage.frame_store import FrameStack
from recollect.table.table import positive_int
from recollect.validation import convert_step

__all__ = ["TransitionBuffer", "TransitionSample"]


@dataclasses.dataclass(frozen=True)
class TransitionSample:
    """A batch of transitions; every field has leading dim ``batch_size``.

    ``terminated`` is a real termination (no bootstrapping); ``truncated`` a
    time limit or other cut (bootstrap from ``next_observation``).

    It unpacks like the tuples of a ``deque``/``random.choices`` buffer:
    ``obs, action, reward, next_obs, done = buf.sample(64)``, where ``done`` is
    ``terminated`` (the flag to stop bootstrapping at). Attribute access is
    unchanged.
    """

    observation: Any
    action: Any
    reward: np.ndarray
    next_observation: Any
    terminated: np.ndarray
    truncated: np.ndarray
    ids: np.ndarray
    probabilities: np.ndarray
    weights: np.ndarray | None = None
    #: ``[B]`` bootstrap discount ``gamma^k`` of n-step samples (``sample(n_step=...)``), else None.
    discount: np.ndarray | None = None

    def __repr__(self) -> str:
        return nest_repr(self)

    def __iter__(self) -> Iterator[Any]:
        """Yields ``observation, action, reward, next_observation, terminated``."""
        return iter(
            (self.observation, self.action, self.reward, self.next_observation, self.terminated)
        )


class TransitionBuffer:
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

    Example:
        >>> buf = TransitionBuffer(capacity=1000, rng=0)
        >>> buf.add(np.zeros(4, np.float32), 1, 1.0, np.ones(4, np.float32), False)
        >>> buf.sample(2).next_observation.shape
        (2, 4)
    """

    kind: ClassVar[str] = "TransitionBuffer"

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
            self._prioritized = self._prioritized.copy()

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
        new_lo = max(int(buffer.table.index.t_clear[0]), t + 1 - buffer.max_length)
        if len(broken) == 0 or prev_t < new_lo:
            return chained
        refs = self._finals.append([p[broken] for p in self._pending], prev_t, new_lo)
        self._final_ref[broken, prev_t % buffer.max_length] = refs
        return chained

    def clear(self) -> None:
        """Forgets every transition. An add whose observation continues the last
        ``next_observation`` still continues its chain (a frame stack keeps its history
        frames, so it comes back exactly as passed); any other starts a new one."""
        if self._buffer is None:
            return
        with self._buffer.lock:
            self._buffer.clear()
            self._finals.clear()

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
        n, gamma = _n_step_args(n_step, discount)
        options = {}
        if importance_sampling_exponent is not None:
            if not isinstance(self.replay_buffer.sampler, Prioritized):
                raise InvalidArgumentError(
                    "importance_sampling_exponent needs a prioritized buffer; construct "
                    "TransitionBuffer(..., prioritized=True)."
                )
            options["importance_sampling_exponent"] = importance_sampling_exponent
        buffer = self.replay_buffer
        with buffer.lock:
            draw = buffer.table.draw(
                batch_size, 1, within_episode=False, time_axis=False, **options
            )
            return self._sample_at(draw.rows, draw.times, n, gamma, draw)

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
        n, gamma = _n_step_args(n_step, discount)
        rows = np.asarray(rows, np.int64).reshape(-1)
        times = np.asarray(times, np.int64).reshape(-1)
        buffer = self.replay_buffer
        with buffer.lock:
            clock = self._clock()
            lo = max(int(buffer.table.index.t_clear[0]), clock - buffer.max_length)
            bad = (rows < 0) | (rows >= self._num_envs) | (times < lo) | (times >= clock)
            if rows.shape != times.shape or bad.any():
                raise InvalidArgumentError(
                    f"sample_at needs stored steps: rows in [0, {self._num_envs}) and times in "
                    f"[{lo}, {clock}), of one shape; got rows {rows.tolist()[:8]}, times "
                    f"{times.tolist()[:8]}."
                )
            return self._sample_at(rows, times, n, gamma, None)

    def _sample_at(
        self, rows: np.ndarray, times: np.ndarray, n: int, gamma: float | None, draw: Any
    ) -> TransitionSample:
        """The sample at ``(rows, times)``; the caller holds the buffer lock."""
        buffer = self.replay_buffer
        if gamma is None:
            leaves, next_obs = self._gather_transitions(rows, times)
        else:
            slots = times % buffer.max_length
            leaves = buffer.storage.gather(rows, slots, times=times)
            fields = n_step_fields(self, rows, times, n, gamma)
            next_obs = fields.pop("next_observation")
        data = buffer.flat_spec.unflatten(leaves)
        if gamma is not None:
            data.update(fields)
        ones = np.ones(len(rows))
        return TransitionSample(
            observation=data["observation"],
            action=data["action"],
            reward=data["reward"],
            next_observation=self._obs_flat.unflatten(next_obs),
            terminated=data["terminated"],
            truncated=data["truncated"],
            ids=id_layout.encode(rows, times) if draw is None else draw.ids,
            probabilities=ones if draw is None else draw.probabilities,
            weights=None if draw is None else draw.weights,
            discount=data.get("discount"),
        )

    def update_priorities(self, ids: Any, priorities: Any) -> int:
        """Sets priorities of sampled transitions (prioritized buffers).

        Returns:
            Number of ids skipped because their transitions were overwritten.

        Raises:
            InvalidArgumentError: a uniform buffer, or NaN/inf/negative
                priorities (nothing is changed).
        """
        return self.replay_buffer.update_priorities(ids, priorities)

    def _gather_transitions(
        self, rows: np.ndarray, times: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Step leaves of ``(rows, times)`` and their next observations.

        Observations and next observations are ONE gather of ``2 * B`` rows per
        observation leaf (large ones are split over threads), whose halves are
        the two contiguous results.
        """
        buffer = self.replay_buffer
        length, obs_ids, storage = buffer.max_length, self._obs_leaf_ids, buffer.storage
        both_rows = np.concatenate([rows, rows])
        both_times = np.concatenate([times, times + 1])
        both = storage.gather(both_rows, both_times % length, times=both_times, leaf_ids=obs_ids)
        other_ids = self._other_leaf_ids
        leaves: list[Any] = [None] * len(buffer.flat_spec.paths)
        others = storage.gather(rows, times % length, times=times, leaf_ids=other_ids)
        for i, leaf in zip(other_ids, others, strict=True):
            leaves[i] = leaf
        batch = len(rows)
        for i, leaf in zip(obs_ids, both, strict=True):
            leaves[i] = leaf[:batch]
        return leaves, self.next_observations(rows, times, [leaf[batch:] for leaf in both])

    def _clock(self) -> int:
        """The step time of the next add (every row shares one clock here)."""
        return int(self.replay_buffer.table.index.t[0])

    def clock(self) -> int:
        """Steps added per env so far: the step time of the next :meth:`add` (0 when empty)."""
        return 0 if self._buffer is None else self._clock()

    def chain_breaks(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Bool, shape of ``rows``: whether the step at ``(rows, slots)`` keeps its own
        next observation (its episode or observation chain ends there)."""
        return self._final_ref[rows, slots] >= 0

    def next_observations(
        self, rows: np.ndarray, times: np.ndarray, out: list[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Next observation leaves of steps ``(rows, times)`` (``[B, ...]`` each).

        ``out``: the observations of the following steps, if already gathered.
        The caller holds the buffer lock.
        """
        buffer = self.replay_buffer
        length = buffer.max_length
        if out is None:
            following = times + 1
            out = buffer.storage.gather(
                rows, following % length, times=following, leaf_ids=self._obs_leaf_ids
            )
        refs = self._final_ref[rows, times % length]
        has_final = np.flatnonzero(refs >= 0)
        if len(has_final):
            for o, v in zip(out, self._finals.gather(refs[has_final]), strict=True):
                o[has_final] = v
        newest = np.flatnonzero((times == self._clock() - 1) & (refs < 0))
        if len(newest):
            for o, p in zip(out, self._pending, strict=True):
                o[newest] = p[rows[newest]]
        return out

    # -- state ------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """JSON-able construction arguments (and the inner buffer's, once built)."""
        prioritized, stack = self._prioritized, self._frame_stack
        return {
            "capacity": self._capacity,
            "num_envs": self._num_envs,
            "prioritized": None if prioritized is None else prioritized.get_config(),
            "frame_stack": None if stack is None else stack.config(),
            **({"compression": json_compression(self._compression)} if self._compression else {}),
            "replay": None if self._buffer is None else self._buffer.config(),
        }

    def state_dict(self) -> dict[str, Any]:
        """The inner buffer's state plus the observation chains (``final_ref`` ring columns,
        pending next observations, the live final observations)."""
        if self._buffer is None:
            rng = self._rng
            generator = rng if isinstance(rng, np.random.Generator) else None
            if generator is None and rng is not None:
                generator = np.random.default_rng(rng)
            return {"rng": None if generator is None else encode_rng(generator)}
        finals = self._finals
        pos = np.arange(finals.start, finals.n) % max(finals.size, 1)
        live = finals.size > 0
        return {
            "replay": self._buffer.state_dict(),
            "chain": {
                "columns": {"final_ref": self._final_ref[:, :, None]},
                "pending": {f"{i:03d}": p for i, p in enumerate(self._pending)},
                "has_pending": self._has_pending,
                "finals": {
                    "arrays": {
                        f"{i:03d}": a[pos] if live else a for i, a in enumerate(finals.arrays)
                    },
                    "times": finals.times[pos] if live else finals.times,
                    "size": finals.size,
                    "start": finals.start,
                    "n": finals.n,
                },
            },
        }

    def restore(self, buffer: ReplayBuffer, chain: dict[str, Any]) -> None:
        """Adopts a restored inner ``buffer`` and the saved observation ``chain`` state
        (``state_dict()["chain"]``); used when loading a checkpoint.

        Raises:
            CheckpointError: the chain state does not match the buffer's spec.
        """
        if isinstance(buffer.sampler, Prioritized):
            self._prioritized = buffer.sampler
        self._attach(buffer, buffer.data_spec["observation"])
        ref = np.full((self._num_envs, buffer.max_length, 1), -1, np.int64)
        source = chain["columns"]["final_ref"]
        if hasattr(source, "read_into"):
            source.read_into(ref)
        else:
            ref[...] = source
        self._final_ref = ref[:, :, 0].copy()
        pending = [np.asarray(chain["pending"][k]) for k in sorted(chain["pending"])]
        has_pending = np.asarray(chain["has_pending"])
        f = chain["finals"]
        size, start, n = int(f["size"]), int(f["start"]), int(f["n"])
        entries = [np.asarray(f["arrays"][k]) for k in sorted(f["arrays"])]
        times = np.asarray(f["times"], np.int64)
        flat = self._obs_flat
        expect = [((self._num_envs, *s), d) for s, d in zip(flat.shapes, flat.dtypes, strict=True)]
        live = n - start if size else 0
        got = [(p.shape, p.dtype) for p in pending]
        if got != expect or has_pending.shape != (self._num_envs,) or len(times) != live:
            raise CheckpointError("TransitionBuffer state does not match its spec.")
        self._pending, self._has_pending = pending, has_pending.astype(bool)
        finals = self._finals
        finals.size, finals.start, finals.n = size, start, n
        pos = np.arange(start, n) % max(size, 1)
        finals.arrays = []
        for entry, shape, dtype in zip(entries, flat.shapes, flat.dtypes, strict=True):
            array = np.zeros((size, *shape), dtype)
            if size:
                array[pos] = entry
            finals.arrays.append(array)
        finals.times = np.zeros(size, np.int64)
        if size:
            finals.times[pos] = times

    def save(self, path: str | os.PathLike) -> Any:
        """Writes a checkpoint directory, atomically (see :meth:`ReplayBuffer.save`).

        Returns:
            The absolute checkpoint path.
        """
        if self._buffer is None:
            return write_checkpoint(path, self.kind, self.config(), self.state_dict())
        self._buffer.check_saveable()
        with self._buffer.lock:
            layout = self._buffer.stored_layout()
            return write_checkpoint(path, self.kind, self.config(), self.state_dict(), layout)

    @classmethod
    def from_saved(cls, saved: Saved, *, mmap: bool = False) -> Self:
        """Rebuilds a TransitionBuffer from a state directory.

        Raises:
            CheckpointError: another kind, or a malformed configuration or state.
        """
        where = saved.where
        if saved.kind != cls.kind:
            raise CheckpointError(
                f"{where}: holds a {saved.kind}, not a {cls.kind}; load it with "
                f"recollect.{saved.kind}.load."
            )
        config, state = saved.config, saved.state
        try:
            prioritized = config.get("prioritized")
            stack = config.get("frame_stack")
            if stack is not None:
                padding = stack["padding"]
                padding = padding if isinstance(padding, str) else np.asarray(padding)
                stack = FrameStack(**{**stack, "padding": padding})
            tb = cls(
                config["capacity"],
                config["num_envs"],
                decode_rng(state.get("rng"), where) if config.get("replay") is None else None,
                prioritized=False if prioritized is None else Prioritized(**prioritized),
                frame_stack=stack,
                compression=config.get("compression"),
            )
        except (TypeError, ValueError, KeyError) as err:
            raise CheckpointError(f"{where}: invalid TransitionBuffer options: {err}") from err
        if config.get("replay") is None:
            return tb
        buffer = ReplayBuffer.from_saved(
            Saved("ReplayBuffer", config["replay"], state["replay"], saved.manifest, where),
            mmap=mmap,
        )
        spec = buffer.data_spec
        if not isinstance(spec, dict) or "observation" not in spec:
            raise CheckpointError(f"{where}: a TransitionBuffer spec needs an 'observation' entry.")
        try:
            tb.restore(buffer, state["chain"])
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: bad TransitionBuffer state ({err}).") from err
        except CheckpointError as err:
            raise CheckpointError(f"{where}: {err}") from err
        return tb

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = False) -> Self:
        """Restores a TransitionBuffer written by :meth:`save` (format 1 and 2).

        Raises:
            CheckpointError: missing or damaged files, a newer format version,
                or a checkpoint of another kind.
        """
        return load_consistent(path, lambda saved: cls.from_saved(saved, mmap=mmap))


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


def _n_step_args(n_step: Any, discount: Any) -> tuple[int, float | None]:
    if n_step is None and discount is None:
        return 1, None
    n = 1 if n_step is None else positive_int("n_step", n_step)
    if discount is None:
        raise InvalidArgumentError(
            f"n-step sampling needs a discount; got n_step={n_step}, discount=None. Pass e.g. "
            "discount=0.99."
        )
    return n, check_discount(discount)


def _row_bytes(x: np.ndarray) -> np.ndarray:
    """The bytes of each env row of ``x`` (``[num_envs, ...]``) as uint8 ``[num_envs, nbytes]``."""
    return np.ascontiguousarray(x).reshape(len(x), -1).view(np.uint8)


def _add_dim(tree: Any) -> Any:
    import optree

    return optree.tree_map(lambda x: np.asarray(x)[None], tree, none_is_leaf=False)
