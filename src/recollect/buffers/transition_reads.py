"""The stored transitions of a :class:`~recollect.TransitionBuffer` and their observation
chains: writing a step, sampling transitions and their next observations (stored once, in
the following step, or kept aside where the observation chain broke), n-step transitions
(:mod:`recollect.buffers.nstep_transitions`), and the chain's checkpoint state."""

from __future__ import annotations

from typing import Any

import numpy as np
import optree

from recollect import ids as id_layout
from recollect.buffers.final_observations import FinalObservations
from recollect.buffers.nstep_transitions import n_step_fields
from recollect.buffers.replay_buffer import ReplayBuffer, RngLike
from recollect.buffers.transition_rows import copy_value, same_bytes, step_writer
from recollect.buffers.transition_sample import TransitionSample, step_spec
from recollect.errors import CheckpointError, InvalidArgumentError
from recollect.samplers.prioritized import Prioritized
from recollect.specs import ArraySpec, FlatSpec
from recollect.storage.frames.frame_store import FrameStack
from recollect.storage.ring import RingStorage
from recollect.validation import convert_step, exact_matcher

__all__ = ["TransitionReader"]


class TransitionReader:
    """The inner :class:`~recollect.ReplayBuffer` of a TransitionBuffer and the per-env
    observation chains around it (built at the first add, or at checkpoint loading).

    Args:
        buffer: the inner buffer; its spec has an ``"observation"`` entry (and
            ``"is_first"`` with a frame stack).
        obs_spec: the observation's spec (``buffer.data_spec["observation"]``).
        num_envs: the buffer's rows.
        capacity: transitions stored in total (bounds the final observations ring).

    Attributes:
        replay_buffer: ``buffer``.
        obs_flat: the observation's :class:`~recollect.specs.FlatSpec`.
        pending: per observation leaf ``[num_envs, ...]``: the last ``next_observation``.
        has_pending: bool ``[num_envs]``: whether ``pending`` holds one.
        final_ref: int64 ``[num_envs, max_length]``: per stored slot the index of its
            kept next observation in ``finals`` (-1: the following step holds it).
        finals: the :class:`FinalObservations` ring.
    """

    def __init__(self, buffer: ReplayBuffer, obs_spec: Any, num_envs: int, capacity: int) -> None:
        self.replay_buffer = buffer
        self.num_envs = num_envs
        self.obs_flat = FlatSpec(obs_spec)
        paths = buffer.writer.flat_spec.paths
        self.obs_leaf_ids = [
            i for i, p in enumerate(paths) if p == "observation" or p.startswith("observation/")
        ]
        self.other_leaf_ids = [i for i in range(len(paths)) if i not in self.obs_leaf_ids]
        self.first_id = paths.index("is_first") if "is_first" in paths else None
        self.pending = [
            np.zeros((num_envs, *s), d)
            for s, d in zip(self.obs_flat.shapes, self.obs_flat.dtypes, strict=True)
        ]
        self.has_pending = np.zeros(num_envs, bool)
        self.final_ref = np.full((num_envs, buffer.writer.max_length), -1, np.int64)
        self.finals = FinalObservations(self.obs_flat, capacity + num_envs)
        # input of the exact dtypes and shapes (with the env dim) skips convert_step
        self.match_step = exact_matcher(buffer.writer.flat_spec, (num_envs,))
        self.match_next = exact_matcher(self.obs_flat, (num_envs,))
        #: ``(shape, dtype)`` of an exact next observation when the observation is one array
        self.next_exact = None
        if isinstance(obs_spec, ArraySpec):
            self.next_exact = ((num_envs, *obs_spec.shape), np.dtype(obs_spec.dtype))
        self.write_step = step_writer(buffer, num_envs)

    @classmethod
    def build(
        cls,
        example: tuple[Any, Any, Any],
        capacity: int,
        num_envs: int,
        *,
        rng: RngLike,
        sampler: Prioritized | None,
        frame_stack: FrameStack | None,
        options: dict[str, Any],
    ) -> TransitionReader:
        """A reader around a new inner buffer whose spec is inferred from ``example``, the
        ``(observation, action, reward)`` of the first add (see ``step_spec``);
        ``options``: ReplayBuffer's compression and storage keywords."""
        spec = step_spec(*example, num_envs, frame_stack is not None)
        buffer = ReplayBuffer(
            spec,
            capacity,
            num_envs,
            rng=rng,
            sampler=sampler,
            sequence_length=None if sampler is None else 1,
            frame_stacks=None if frame_stack is None else {"observation": frame_stack},
            **options,
        )
        return cls(buffer, spec["observation"], num_envs, capacity)

    @classmethod
    def restored(
        cls, buffer: ReplayBuffer, chain: dict[str, Any], num_envs: int, capacity: int
    ) -> TransitionReader:
        """A reader around a restored ``buffer`` with the saved ``chain`` (:meth:`chain_state`).

        Raises:
            CheckpointError: the chain state does not match the buffer's spec.
        """
        reader = cls(buffer, buffer.data_spec["observation"], num_envs, capacity)
        reader.restore_chains(chain)
        return reader

    @property
    def nbytes(self) -> int:
        """Bytes allocated: step storage, final observations and per-env pending state."""
        pending = sum(p.nbytes for p in self.pending)
        return self.replay_buffer.nbytes + self.finals.nbytes + pending + self.final_ref.nbytes

    def clock(self) -> int:
        """The step time of the next add (every row shares one clock here)."""
        return int(self.replay_buffer.table.clocks[0])

    # -- writing ----------------------------------------------------------
    def convert(
        self,
        observation: Any,
        action: Any,
        reward: Any,
        next_observation: Any,
        terminated: Any,
        truncated: Any,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Validated leaves of the step and of ``next_observation`` (nothing is written).

        Raises:
            SpecError, ShapeError, DTypeError, CastError: an argument does not match the spec.
        """
        lead = (self.num_envs,)
        if self.num_envs == 1:  # scalars get the env dim; anything else is checked below
            terminated = np.reshape(terminated, 1) if np.ndim(terminated) == 0 else terminated
            truncated = np.reshape(truncated, 1) if np.ndim(truncated) == 0 else truncated
        step = {
            "observation": observation,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": np.broadcast_to(truncated, lead) if np.ndim(truncated) == 0 else truncated,
        }
        if self.num_envs == 1:
            step = {
                k: v if k in ("terminated", "truncated") else _add_dim(v) for k, v in step.items()
            }
            next_observation = _add_dim(next_observation)
        if self.first_id is not None:
            step["is_first"] = np.zeros(lead, bool)  # set from the chain below
        leaves = convert_step(self.replay_buffer.writer.flat_spec, step, lead, "add")
        nxt = convert_step(self.obs_flat, next_observation, lead, "add next_observation")
        return leaves, nxt

    def convert_batched(
        self,
        observation: Any,
        action: Any,
        reward: Any,
        next_observation: Any,
        terminated: Any,
        truncated: Any,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """:meth:`convert` of values that have the env dim even when ``num_envs == 1``
        (``terminated``, ``truncated``: ``[num_envs]``); input of the exact dtypes and shapes
        is taken as it is (no copy, no conversion), anything else is converted or rejected
        as :meth:`convert` does.

        Raises:
            SpecError, ShapeError, DTypeError, CastError: an argument does not match the spec.
        """
        step = {
            "observation": observation,
            "action": action,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
        }
        lead = (self.num_envs,)
        if self.first_id is not None:
            step["is_first"] = np.zeros(lead, bool)  # set from the chain in write()
        leaves = self.match_step(step)
        if leaves is None:
            leaves = convert_step(self.replay_buffer.writer.flat_spec, step, lead, "add")
        exact = self.next_exact
        if (
            exact is not None
            and type(next_observation) is np.ndarray
            and next_observation.shape == exact[0]
            and next_observation.dtype is exact[1]
        ):  # one array of the exact shape and dtype (Box observations)
            return list(leaves), [next_observation]
        nxt = self.match_next(next_observation)
        if nxt is None:
            nxt = convert_step(self.obs_flat, next_observation, lead, "add next_observation")
        return list(leaves), list(nxt)

    def add_batched(self, *transition: Any) -> None:
        """``TransitionBuffer.add_batched`` once the spec is known: converts (exact values
        as they are), then writes under the buffer lock on the calling thread."""
        leaves, nxt = self.convert_batched(*transition)
        with self.replay_buffer.writer.lock:
            self.write(leaves, nxt)

    def write(self, leaves: list[np.ndarray], nxt: list[np.ndarray]) -> None:
        """Stores the validated step ``leaves`` (``[num_envs, ...]`` each) and remembers
        ``nxt``, the next observation leaves; the caller holds the buffer lock."""
        buffer = self.replay_buffer
        t = buffer.table.next_steps(None)[0]  # an int while every row shares one clock
        if type(t) is not int:  # per-row clocks (all equal here: every add writes each row)
            t = int(t[0])
        slot = t % buffer.writer.max_length
        chained = self._link_previous([leaves[i] for i in self.obs_leaf_ids], t)
        if self.first_id is not None:
            leaves[self.first_id] = ~chained
        self.final_ref[:, slot] = -1
        self.write_step(leaves)  # on this thread: storage, then the table's record
        for pending, value in zip(self.pending, nxt, strict=True):
            pending[...] = value
        self.has_pending.fill(True)

    def _link_previous(self, obs: list[np.ndarray], t: int) -> np.ndarray:
        """Keeps the previous next_observation of envs whose chain breaks now (``t``: the
        clock of the step being written).

        Returns bool ``[num_envs]``: the envs whose observation continues the chain.
        """
        buffer = self.replay_buffer
        # Bitwise: NaN chains, and -0.0 does not chain to 0.0 (replayed exactly).
        if self.num_envs == 1:  # one row: a memcmp of its bytes, no [1, nbytes] bool temporary
            had = bool(self.has_pending[0])
            same = had and same_bytes(obs, self.pending)
            chained = _CHAINED if same else _NOT_CHAINED
            if same or not had:
                return chained
        else:
            chained = self.has_pending.copy()
            for current, pending in zip(obs, self.pending, strict=True):
                chained &= (_row_bytes(current) == _row_bytes(pending)).all(axis=1)
        broken = np.flatnonzero(self.has_pending & ~chained)
        prev_t = t - 1
        new_lo = max(int(buffer.table.cleared_before[0]), t + 1 - buffer.writer.max_length)
        if len(broken) == 0 or prev_t < new_lo:
            return chained
        refs = self.finals.append([p[broken] for p in self.pending], prev_t, new_lo)
        self.final_ref[broken, prev_t % buffer.writer.max_length] = refs
        return chained

    def clear(self) -> None:
        """Forgets every transition (the pending next observations stay)."""
        with self.replay_buffer.writer.lock:
            self.replay_buffer.clear()
            self.finals.clear()

    # -- reading ----------------------------------------------------------
    def sample(
        self,
        batch_size: int,
        n: int,
        gamma: float | None,
        importance_sampling_exponent: float | None,
    ) -> TransitionSample:
        """``TransitionBuffer.sample`` of validated arguments (``n``, ``gamma`` from
        :func:`~recollect.buffers.transition_sample.n_step_args`)."""
        buffer = self.replay_buffer
        options = {}
        if importance_sampling_exponent is not None:
            if not isinstance(buffer.reader.sampler, Prioritized):
                raise InvalidArgumentError(
                    "importance_sampling_exponent needs a prioritized buffer; construct "
                    "TransitionBuffer(..., prioritized=True)."
                )
            options["importance_sampling_exponent"] = importance_sampling_exponent
        with buffer.writer.lock:
            draw = buffer.table.draw(
                batch_size, 1, within_episode=False, time_axis=False, **options
            )
            return self.sample_locked(draw.rows, draw.times, n, gamma, draw)

    def sample_at(self, rows: Any, times: Any, n: int, gamma: float | None) -> TransitionSample:
        """``TransitionBuffer.sample_at`` of validated ``n``, ``gamma``.

        Raises:
            InvalidArgumentError: rows or times of another shape, a row out of
                range, or a step that is not stored.
        """
        rows = np.asarray(rows, np.int64).reshape(-1)
        times = np.asarray(times, np.int64).reshape(-1)
        buffer = self.replay_buffer
        with buffer.writer.lock:
            clock = self.clock()
            lo = max(int(buffer.table.cleared_before[0]), clock - buffer.writer.max_length)
            bad = (rows < 0) | (rows >= self.num_envs) | (times < lo) | (times >= clock)
            if rows.shape != times.shape or bad.any():
                raise InvalidArgumentError(
                    f"sample_at needs stored steps: rows in [0, {self.num_envs}) and times in "
                    f"[{lo}, {clock}), of one shape; got rows {rows.tolist()[:8]}, times "
                    f"{times.tolist()[:8]}."
                )
            return self.sample_locked(rows, times, n, gamma, None)

    def sample_locked(
        self, rows: np.ndarray, times: np.ndarray, n: int, gamma: float | None, draw: Any
    ) -> TransitionSample:
        """The sample at ``(rows, times)``; the caller holds the buffer lock."""
        buffer = self.replay_buffer
        if gamma is None:
            leaves, next_obs = self._gather_transitions(rows, times)
        else:
            slots = times % buffer.writer.max_length
            leaves = buffer.storage.gather(rows, slots, times=times)
            fields = n_step_fields(self, rows, times, n, gamma)
            next_obs = fields.pop("next_observation")
        data = buffer.writer.flat_spec.unflatten(leaves)
        if gamma is not None:
            data.update(fields)
        ones = np.ones(len(rows))
        return TransitionSample(
            observation=data["observation"],
            action=data["action"],
            reward=data["reward"],
            next_observation=self.obs_flat.unflatten(next_obs),
            terminated=data["terminated"],
            truncated=data["truncated"],
            ids=id_layout.encode(rows, times) if draw is None else draw.ids,
            probabilities=ones if draw is None else draw.probabilities,
            weights=None if draw is None else draw.weights,
            discount=data.get("discount"),
        )

    def _gather_transitions(
        self, rows: np.ndarray, times: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Step leaves of ``(rows, times)`` and their next observations.

        Observations and next observations are ONE gather of ``2 * B`` rows per
        observation leaf (large ones are split over threads), whose halves are
        the two contiguous results.
        """
        buffer = self.replay_buffer
        length, obs_ids, storage = buffer.writer.max_length, self.obs_leaf_ids, buffer.storage
        both_rows = np.concatenate([rows, rows])
        both_times = np.concatenate([times, times + 1])
        both = storage.gather(both_rows, both_times % length, times=both_times, leaf_ids=obs_ids)
        other_ids = self.other_leaf_ids
        leaves: list[Any] = [None] * len(buffer.writer.flat_spec.paths)
        others = storage.gather(rows, times % length, times=times, leaf_ids=other_ids)
        for i, leaf in zip(other_ids, others, strict=True):
            leaves[i] = leaf
        batch = len(rows)
        for i, leaf in zip(obs_ids, both, strict=True):
            leaves[i] = leaf[:batch]
        return leaves, self.next_observations(rows, times, [leaf[batch:] for leaf in both])

    def chain_breaks(self, rows: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Bool, shape of ``rows``: whether the step at ``(rows, slots)`` keeps its own
        next observation (its episode or observation chain ends there)."""
        return self.final_ref[rows, slots] >= 0

    def next_observations(
        self, rows: np.ndarray, times: np.ndarray, out: list[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Next observation leaves of steps ``(rows, times)`` (``[B, ...]`` each).

        ``out``: the observations of the following steps, if already gathered.
        The caller holds the buffer lock.
        """
        buffer = self.replay_buffer
        length = buffer.writer.max_length
        if out is None:
            following = times + 1
            out = buffer.storage.gather(
                rows, following % length, times=following, leaf_ids=self.obs_leaf_ids
            )
        refs = self.final_ref[rows, times % length]
        has_final = np.flatnonzero(refs >= 0)
        if len(has_final):
            for o, v in zip(out, self.finals.gather(refs[has_final]), strict=True):
                o[has_final] = v
        newest = np.flatnonzero((times == self.clock() - 1) & (refs < 0))
        if len(newest):
            for o, p in zip(out, self.pending, strict=True):
                o[newest] = p[rows[newest]]
        return out

    def item_at(self, row: int, time: int) -> tuple[Any, ...] | None:
        """The stored transition of env ``row`` at step ``time`` as the values
        ``(observation, action, reward, next_observation, terminated, truncated)``, each a
        copy (numpy scalars for 0-d leaves), read from the ring arrays directly (no gather,
        no sample); None where the storage is not a plain ring (frame stacks, compressed
        leaves: use :meth:`sample_at`). ``(row, time)`` is stored; the caller holds the
        buffer lock."""
        buffer = self.replay_buffer
        storage = buffer.storage
        if type(storage) is not RingStorage:
            return None
        arrays, length = storage.arrays, buffer.writer.max_length
        slot = time % length
        leaves = [copy_value(a[row, slot]) for a in arrays]
        ref = int(self.final_ref[row, slot])
        if ref >= 0:
            nxt = [v[0] for v in self.finals.gather(np.array([ref], np.int64))]
        elif time == self.clock() - 1:
            nxt = [p[row].copy() for p in self.pending]
        else:
            following = (time + 1) % length
            nxt = [arrays[i][row, following].copy() for i in self.obs_leaf_ids]
        data = buffer.writer.flat_spec.unflatten(leaves)
        return (
            data["observation"],
            data["action"],
            data["reward"],
            self.obs_flat.unflatten(nxt),
            data["terminated"],
            data["truncated"],
        )

    # -- checkpoint state -------------------------------------------------
    def chain_state(self) -> dict[str, Any]:
        """The observation chains: ``final_ref`` ring columns, pending next observations,
        the live final observations (``TransitionBuffer.state_dict()["chain"]``)."""
        finals = self.finals
        pos = np.arange(finals.start, finals.n) % max(finals.size, 1)
        live = finals.size > 0
        return {
            "columns": {"final_ref": self.final_ref[:, :, None]},
            "pending": {f"{i:03d}": p for i, p in enumerate(self.pending)},
            "has_pending": self.has_pending,
            "finals": {
                "arrays": {f"{i:03d}": a[pos] if live else a for i, a in enumerate(finals.arrays)},
                "times": finals.times[pos] if live else finals.times,
                "size": finals.size,
                "start": finals.start,
                "n": finals.n,
            },
        }

    def restore_chains(self, chain: dict[str, Any]) -> None:
        """Adopts the saved ``chain`` (:meth:`chain_state`).

        Raises:
            CheckpointError: the chain state does not match the observation spec.
        """
        num_envs = self.num_envs
        ref = np.full((num_envs, self.replay_buffer.writer.max_length, 1), -1, np.int64)
        source = chain["columns"]["final_ref"]
        if hasattr(source, "read_into"):
            source.read_into(ref)
        else:
            ref[...] = source
        pending = [np.asarray(chain["pending"][k]) for k in sorted(chain["pending"])]
        has_pending = np.asarray(chain["has_pending"])
        f = chain["finals"]
        size, start, n = int(f["size"]), int(f["start"]), int(f["n"])
        entries = [np.asarray(f["arrays"][k]) for k in sorted(f["arrays"])]
        times = np.asarray(f["times"], np.int64)
        flat = self.obs_flat
        expect = [((num_envs, *s), d) for s, d in zip(flat.shapes, flat.dtypes, strict=True)]
        live = n - start if size else 0
        got = [(p.shape, p.dtype) for p in pending]
        if got != expect or has_pending.shape != (num_envs,) or len(times) != live:
            raise CheckpointError("TransitionBuffer state does not match its spec.")
        self.final_ref = ref[:, :, 0].copy()
        self.pending, self.has_pending = pending, has_pending.astype(bool)
        finals = self.finals
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


#: ``_link_previous``'s result for one row (read-only; callers only negate it)
_CHAINED, _NOT_CHAINED = np.ones(1, bool), np.zeros(1, bool)
_CHAINED.flags.writeable = _NOT_CHAINED.flags.writeable = False


def _row_bytes(x: np.ndarray) -> np.ndarray:
    """The bytes of each env row of ``x`` (``[num_envs, ...]``) as uint8 ``[num_envs, nbytes]``."""
    return np.ascontiguousarray(x).reshape(len(x), -1).view(np.uint8)


def _add_dim(tree: Any) -> Any:
    return optree.tree_map(lambda x: np.asarray(x)[None], tree, none_is_leaf=False)
