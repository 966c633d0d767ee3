"""SB3's replay arrays, held in a recollect :class:`~recollect.ReplayBuffer`.

SB3's ``ReplayBuffer`` keeps ``observations``, ``next_observations``,
``actions``, ``rewards``, ``dones`` and ``timeouts`` as arrays
``[buffer_size, n_envs, ...]``. :class:`Sb3Arrays` stores the same fields, with
SB3's dtypes, as the leaves of a recollect ``ReplayBuffer`` (ring storage
``[n_envs, buffer_size, ...]`` per leaf, slot ``t % buffer_size`` = SB3's
``pos``), so every SB3 array is a transposed view of recollect's storage (no
copy; writes through it land in the buffer), while recollect provides item
ids, prioritized sampling, checkpoints and pickling.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from recollect.buffers import ReplayBuffer as CoreReplayBuffer
from recollect.buffers.replay_buffer import buffer_from_saved
from recollect.errors import CheckpointError
from recollect.samplers import Prioritized
from recollect.specs import ArraySpec
from recollect.state.files import Saved
from recollect.storage.ring import RingStorage

__all__ = ["FIELDS", "Sb3Arrays"]

#: SB3's array names, in the order of its ``add`` writes.
FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


class Sb3Arrays:
    """SB3's replay arrays as leaves of a recollect ``ReplayBuffer``.

    Args:
        buffer_size: SB3's ``buffer_size`` (steps per env).
        n_envs: env rows.
        obs_spec: one env's observation spec (an ArraySpec, or a dict of them).
        action_spec: ``ArraySpec((action_dim,), dtype)``.
        rng: seed or Generator of the recollect table (prioritized draws).
        sampler: None (uniform) or a :class:`~recollect.Prioritized`.
        buffer: an existing core buffer to wrap (checkpoint loading); then the
            other arguments but ``buffer_size``/``n_envs`` are ignored.
        store_timeouts: whether ``timeouts`` is a leaf of the buffer. SB3 never
            writes its ``timeouts`` without ``handle_timeout_termination``; then
            it is a zero array beside the buffer (not checkpointed), and each
            ``add`` writes one array less.
    """

    def __init__(
        self,
        buffer_size: int,
        n_envs: int,
        obs_spec: Any = None,
        action_spec: ArraySpec | None = None,
        rng: Any = None,
        sampler: Prioritized | None = None,
        buffer: CoreReplayBuffer | None = None,
        store_timeouts: bool = True,
    ) -> None:
        if buffer is None:
            scalar = ArraySpec((), np.float32)
            spec = {
                "observations": obs_spec,
                "next_observations": obs_spec,
                "actions": action_spec,
                "rewards": scalar,
                "dones": scalar,
                "timeouts": scalar,
            }
            if not store_timeouts:
                del spec["timeouts"]
            buffer = CoreReplayBuffer(
                spec,
                buffer_size * n_envs,
                n_envs,
                rng=rng,
                sampler=sampler,
                sequence_length=None if sampler is None else 1,
            )
        self.replay_buffer = buffer
        self.buffer_size, self.n_envs = buffer.writer.max_length, buffer.num_envs
        paths = buffer.writer.flat_spec.paths
        self.store_timeouts = "timeouts" in paths
        self.side_timeouts = None
        if not self.store_timeouts:
            major = self.ring().time_major  # laid out as the ring's leaves (``flat_of`` views it)
            shape = (self.buffer_size, self.n_envs) if major else (self.n_envs, self.buffer_size)
            zeros = np.zeros(shape, np.float32)
            self.side_timeouts = zeros.swapaxes(0, 1) if major else zeros
        #: per field: its leaf index (an int), or ``{key: leaf index}`` for dict observations
        self.leaf: dict[str, Any] = {}
        for field in FIELDS:
            if field == "timeouts" and not self.store_timeouts:
                continue
            if field in paths:
                self.leaf[field] = paths.index(field)
            else:
                prefix = field + "/"
                self.leaf[field] = {
                    p[len(prefix) :]: i for i, p in enumerate(paths) if p.startswith(prefix)
                }
        self.dict_obs = isinstance(self.leaf["observations"], dict)
        self.order = [field_of(self.leaf, i) for i in range(len(paths))]
        if not self.dict_obs:  # write_step's order
            fields = sorted(FIELDS if self.store_timeouts else set(FIELDS) - {"timeouts"})
            assert [f for f, _ in self.order] == fields, self.order

    # -- geometry ---------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.replay_buffer.capacity

    @property
    def num_envs(self) -> int:
        return self.n_envs

    @property
    def nbytes(self) -> int:
        return self.replay_buffer.nbytes

    def num_frames(self) -> int:
        return self.replay_buffer.num_frames()

    def clock(self) -> int:
        """Steps written per env so far (the step time of the next write)."""
        return int(self.replay_buffer.table.clocks[0])

    # -- views --------------------------------------------------------------
    def ring(self) -> RingStorage:
        """The core buffer's ring storage (RAM or memmap), whose arrays SB3's arrays view."""
        storage = self.replay_buffer.storage
        assert isinstance(storage, RingStorage), type(storage)  # built without frame stacks
        return storage

    def view(self, field: str) -> Any:
        """SB3's array ``field`` ``[buffer_size, n_envs, ...]``: a view of the storage."""
        if field == "timeouts" and self.side_timeouts is not None:
            return self.side_timeouts.swapaxes(0, 1)
        arrays = self.ring().arrays
        where = self.leaf[field]
        if isinstance(where, dict):
            return {key: arrays[i].swapaxes(0, 1) for key, i in where.items()}
        return arrays[where].swapaxes(0, 1)

    def flat(self, field: str) -> Any:
        """The storage of ``field`` flattened, ``[n_envs * buffer_size, ...]`` (a view),
        indexed by :meth:`flat_index`."""
        if field == "timeouts" and self.side_timeouts is not None:
            return self.ring().flat_of(self.side_timeouts)
        views = self.ring().flat_views
        where = self.leaf[field]
        if isinstance(where, dict):
            return {key: views[i] for key, i in where.items()}
        return views[where]

    def flat_index(self, env_indices: Any, batch_inds: Any) -> Any:
        """The index in :meth:`flat` of SB3's ``(env, pos)`` coordinates (int arrays)."""
        return self.ring().flat_index(env_indices, batch_inds)

    # -- writing ------------------------------------------------------------
    def write(self, values: dict[str, Any]) -> None:
        """Writes one step to every env: ``values[field]`` ``[n_envs, ...]``, already in the
        fields' shapes and dtypes (the SB3 layer checked them)."""
        leaves = [
            values[field] if key is None else values[field][key] for field, key in self.order
        ]  # without a timeouts leaf, values["timeouts"] is not read
        self.replay_buffer.writer.write_leaves(leaves)

    def write_step(
        self, obs: Any, next_obs: Any, action: Any, reward: Any, done: Any, timeout: Any
    ) -> None:
        """:meth:`write` with the fields as arguments (the per-step path of SB3's ``add``)."""
        if self.dict_obs:
            self.write(
                {
                    "observations": obs,
                    "next_observations": next_obs,
                    "actions": action,
                    "rewards": reward,
                    "dones": done,
                    "timeouts": timeout,
                }
            )
        elif self.store_timeouts:  # leaves in flat (sorted field) order, see __init__
            self.replay_buffer.writer.write_leaves([action, done, next_obs, obs, reward, timeout])
        else:
            self.replay_buffer.writer.write_leaves([action, done, next_obs, obs, reward])

    def one_plain_row(self) -> bool:
        """Whether the short one-step writes apply: SB3's five fields of a Box space (no
        timeouts leaf, observations and actions not 0-d) in one env row of a plain RAM
        ring without rate limiter or episode index."""
        buffer = self.replay_buffer
        shapes = buffer.writer.flat_spec.shapes  # action, dones, next obs, obs, rewards
        return (
            self.n_envs == 1
            and type(buffer.storage) is RingStorage
            and buffer.table.rate_limiter is None
            and not buffer.writer.episode_aware
            and not self.dict_obs
            and not self.store_timeouts
            and all(shapes[i] != () for i in (0, 2, 3))  # [1, *shape] into [*shape]
        )

    def step_writer(self) -> Callable[[list[np.ndarray]], None]:
        """``write(leaves)`` of one step of every env (leaves in flat order, ``[n_envs, ...]``,
        already checked): the core buffer's ``write_leaves``; or, for SB3's five fields of a
        Box space (no timeouts leaf) in one env row of a plain RAM ring without rate
        limiter, a shorter write of the same effect: each leaf into its slot of the
        row's ``[buffer_size, ...]`` view (``RingStorage.write_unbatched``, the scalar
        rewards and dones as numpy scalars), then ``Table.insert_one``, on the calling
        thread under the table lock."""
        buffer = self.replay_buffer
        storage, table = buffer.storage, buffer.table
        if not self.one_plain_row():
            return buffer.writer.write_leaves
        single = cast(RingStorage, storage).write_unbatched  # type checked above
        insert, lock = table.insert_one, table.lock
        length = buffer.writer.max_length

        def write_one(leaves: list[np.ndarray]) -> None:
            action, done, next_obs, obs, reward = leaves
            with lock:
                single(table.clock % length, (action, done[0], next_obs, obs, reward[0]))
                insert(False)

        return write_one

    def one_env_adder(
        self, obs_dtype: np.dtype, action_dtype: np.dtype
    ) -> Callable[[Any, Any, Any, Any, Any], bool] | None:
        """``add_one(obs, next_obs, action, reward, done) -> bool``: SB3's ``add`` of one env
        in one call, where :meth:`step_writer` gives its one-row writer (None elsewhere).

        It writes the step and returns True only for the exact common form: numpy arrays,
        ``obs``/``next_obs`` ``[1, *obs_shape]`` of ``obs_dtype``, ``action``
        ``[1, action_dim]`` or ``[action_dim]`` of ``action_dtype``, ``reward`` ``[1]``
        float32/float64, ``done`` ``[1]`` bool/float32/float64/int64. Anything else returns
        False with nothing written (the caller converts and checks it the long way). The
        step goes straight into the row's ``[buffer_size, ...]`` views (rewards and dones
        as Python scalars: numpy's cheapest setitem, the same float32 cast as SB3's), then
        ``Table.insert_one``, under the table lock on the calling thread: no converter
        calls, no leaf list, no thread hand-off. It holds the storage's views of the time it
        was built: build it again after the storage's arrays are replaced (``attach`` does).
        """
        if not self.one_plain_row():
            return None
        buffer = self.replay_buffer
        table = buffer.table
        views = cast(RingStorage, buffer.storage).single_row  # one_plain_row checked the ring
        act, dones, next_obs_rows, obs_rows, rewards = views  # flat (sorted field) order
        obs_shape = (1, *obs_rows.shape[1:])
        action_shapes = ((1, *act.shape[1:]), act.shape[1:])
        obs_dtype, action_dtype = np.dtype(obs_dtype), np.dtype(action_dtype)
        one = (1,)
        rewards_ok = (np.dtype(np.float64), np.dtype(np.float32))
        dones_ok = tuple(np.dtype(t) for t in (np.bool_, np.float32, np.float64, np.int64))
        ndarray = np.ndarray
        insert, lock = table.insert_one, table.lock
        length = buffer.writer.max_length

        def add_one(obs: Any, next_obs: Any, action: Any, reward: Any, done: Any) -> bool:
            if not (
                type(obs) is ndarray
                and type(next_obs) is ndarray
                and type(action) is ndarray
                and type(reward) is ndarray
                and type(done) is ndarray
                and obs.dtype is obs_dtype
                and next_obs.dtype is obs_dtype
                and action.dtype is action_dtype
                and obs.shape == obs_shape
                and next_obs.shape == obs_shape
                and action.shape in action_shapes
                and reward.shape == one
                and done.shape == one
                and reward.dtype in rewards_ok
                and done.dtype in dones_ok
            ):
                return False
            with lock:
                slot = table.clock % length
                act[slot] = action  # numpy drops the leading 1 of [1, action_dim]
                dones[slot] = done.item()
                next_obs_rows[slot] = next_obs
                obs_rows[slot] = obs
                rewards[slot] = reward.item()  # a float64 cast to float32 as SB3 casts it
                insert(False)
            return True

        return add_one

    def clear(self) -> None:
        self.replay_buffer.clear()

    # -- sampling (TransitionBuffer's spelling, for code that uses both) -------
    def update_priorities(self, ids: Any, priorities: Any) -> int:
        return self.replay_buffer.update_priorities(ids, priorities)

    # -- state --------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Any:
        """Writes the core buffer's checkpoint directory (see ``ReplayBuffer.save``)."""
        return self.replay_buffer.save(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Sb3Arrays:
        """Restores what :meth:`save` wrote.

        Raises:
            CheckpointError: damaged files, or a buffer without SB3's fields.
        """
        return cls.wrap(CoreReplayBuffer.load(path), str(path))

    @classmethod
    def from_saved(cls, saved: Saved, *, mmap: bool = False) -> Sb3Arrays:
        """Restores the core buffer's ``config()`` and ``state_dict()`` held in ``saved``
        (a pickled SB3 buffer's storage, see :mod:`recollect.sb3.persistence`); ``mmap``
        as ``recollect.buffers.replay_buffer.buffer_from_saved``.

        Raises:
            CheckpointError: a malformed state, or a buffer without SB3's fields.
        """
        return cls.wrap(buffer_from_saved(saved, mmap=mmap), saved.where)

    @classmethod
    def wrap(cls, buffer: CoreReplayBuffer, where: str) -> Sb3Arrays:
        """SB3's arrays of a restored core ``buffer``.

        Raises:
            CheckpointError: ``buffer`` does not hold SB3's fields.
        """
        spec = buffer.data_spec
        if not isinstance(spec, dict) or set(spec) | {"timeouts"} != set(FIELDS):
            raise CheckpointError(f"{where}: not the SB3 arrays of a recollect.sb3 buffer.")
        return cls(buffer.writer.max_length, buffer.num_envs, buffer=buffer)


def field_of(leaf: dict[str, Any], index: int) -> tuple[str, str | None]:
    """``(field, key)`` of leaf ``index`` in :attr:`Sb3Arrays.leaf` (key None but for dicts)."""
    for field, where in leaf.items():
        if where == index:
            return field, None
        if isinstance(where, dict):
            for key, i in where.items():
                if i == index:
                    return field, key
    raise AssertionError(index)  # pragma: no cover - every leaf belongs to a field
