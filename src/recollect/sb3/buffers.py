"""This module's one responsibility: recollect buffers behind SB3's ``ReplayBuffer`` interface.

SB3 builds its buffer as ``cls(buffer_size, observation_space, action_space,
device=, n_envs=, optimize_memory_usage=, **replay_buffer_kwargs)``, calls
``add(obs, next_obs, action, reward, done, infos)`` once per vector-env step
and ``sample(batch_size, env)`` once per gradient step. These classes keep that
contract (including ``pos``, ``full``, ``size()``, ``reset()`` and pickling by
``save_replay_buffer``) and SB3's public attributes. Two storage layouts:

- SB3's (the default): SB3's arrays ``observations``, ``next_observations``,
  ``actions``, ``rewards``, ``dones``, ``timeouts`` ``[buffer_size, n_envs, ...]``
  are views of a recollect ``ReplayBuffer``'s storage
  (:class:`~recollect.sb3.arrays.Sb3Arrays`); writes through them take effect.
- one copy of each observation, with ``optimize_memory_usage=True`` (unlike
  SB3, also with ``handle_timeout_termination``) or ``frame_stack=`` (each
  Atari frame once): a :class:`recollect.TransitionBuffer`; SB3's arrays are
  not available there.

Sampling can be n-step and prioritized in both.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any, ClassVar, Self

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer
from stable_baselines3.common.buffers import ReplayBuffer as Sb3ReplayBuffer

from recollect import ids as id_layout
from recollect.arguments import positive_int
from recollect.buffers import TransitionBuffer
from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.nstep import check_discount
from recollect.samplers import Prioritized
from recollect.sb3 import adds, saving
from recollect.sb3.arrays import Sb3Arrays
from recollect.sb3.attributes import Sb3Array, TrajectoryCuts, sb3_array
from recollect.sb3.options import check_storage, codecs_of, n_step_of
from recollect.sb3.samples import Sb3Draw, pack, to_samples
from recollect.sb3.sampling import gather_fields
from recollect.sb3.spaces import (
    AddConverter,
    action_dtype,
    obs_spec,
    resolve_frame_stack,
)
from recollect.sb3.stack_starts import StackStarts
from recollect.specs import ArraySpec
from recollect.storage.frames.frame_store import FrameStack

__all__ = ["ReplayBuffer"]


class ReplayBuffer(Sb3ReplayBuffer):
    """SB3's ``ReplayBuffer`` on recollect storage (SB3's arrays, or one copy per observation).

    Use it with any SB3 off-policy algorithm::

        model = DQN("MlpPolicy", env, replay_buffer_class=recollect.sb3.ReplayBuffer,
                    replay_buffer_kwargs=dict(n_step=3, gamma=0.99))

    Args:
        buffer_size: transitions in total (``buffer_size // n_envs`` per env, as SB3).
        observation_space: a Box, Discrete, MultiDiscrete, MultiBinary or Dict space.
        action_space: the action space (actions are stored ``[action_dim]`` in
            the space's dtype, float64 as float32, as SB3 does).
        device: torch device of the sampled tensors.
        n_envs: parallel envs; every ``add`` argument has leading dim ``n_envs``.
        optimize_memory_usage: store each observation once (a
            TransitionBuffer; unlike SB3, also with ``handle_timeout_termination``);
            SB3's arrays are then not available.
        handle_timeout_termination: read ``infos[i]["TimeLimit.truncated"]``
            and bootstrap through timeouts (SB3's default).
        frame_stack: None, an int ``k`` for SB3's ``VecFrameStack(k)`` of
            single-channel frames (``[84, 84, k]`` or, after ``VecTransposeImage``,
            ``[k, 84, 84]``; zero padding), or a :class:`recollect.FrameStack`.
            Each frame is then stored once and stacks are rebuilt bit-exactly.
        n_step: n-step returns (``sample`` then fills ``discounts`` with
            ``gamma^k``); ``n_steps`` is accepted as SB3's spelling.
        gamma: discount of n-step returns in ``[0, 1]``.
        storage: ``"numpy"`` (RAM) or ``"memmap"``: the transitions live in files
            of ``directory`` (compressed frames in append-only block files with
            ``compression``), in the one-copy layout (SB3's arrays are then not
            available); see ``recollect.TransitionBuffer(storage=...)``.
        directory: memmap directory, new or empty; required with
            ``storage="memmap"`` and only allowed with it.
        rng: seed or ``np.random.Generator`` for sampling; None draws a seed
            from numpy's global RNG, which SB3's ``set_random_seed`` seeds.
        compression: a codec (``"zstd"``, ``"lz4"``, ``"zlib"``) for the
            observations (each frame once, with ``frame_stack``), or
            ``{leaf path: codec}``; see ``recollect.ReplayBuffer(compression=...)``.

    Raises:
        InvalidArgumentError: a bad argument or combination, an int
            ``frame_stack`` with no first/last axis of that size, or a memmap
            ``directory`` that is missing, not empty or given without memmap.
        SpecError: a :class:`recollect.FrameStack` whose axis or size does not
            fit the observation space.
    """

    prioritized: ClassVar[bool] = False
    # SB3's arrays: views of recollect's storage, read-only as attributes (item writes
    # such as ``dones[pos] = 1`` land); see recollect.sb3.attributes
    observations = Sb3Array("observations")
    next_observations = Sb3Array("next_observations")
    actions = Sb3Array("actions")
    rewards = Sb3Array("rewards")
    dones = Sb3Array("dones")
    timeouts = Sb3Array("timeouts")

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        *,
        frame_stack: int | FrameStack | None = None,
        n_step: int | None = None,
        gamma: float = 0.99,
        storage: str = "numpy",
        directory: str | os.PathLike | None = None,
        rng: int | np.random.Generator | None = None,
        n_steps: int | None = None,
        compression: Any = None,
    ) -> None:
        positive_int("buffer_size", buffer_size)
        positive_int("n_envs", n_envs)
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = bool(optimize_memory_usage)
        self.handle_timeout_termination = bool(handle_timeout_termination)
        self.n_step = n_step_of(n_step, n_steps)
        self.gamma = check_discount(gamma)
        storage_kwargs = check_storage(storage, directory)
        self.storage, self.directory = storage, directory
        self.frame_stack = resolve_frame_stack(frame_stack, observation_space)
        self.stack_starts: StackStarts | None = None
        if self.frame_stack is not None:
            shape, dtype = observation_space.shape, np.dtype(observation_space.dtype)
            assert shape is not None  # resolve_frame_stack accepts Box spaces only
            self.frame_stack.frame_spec("observation", ArraySpec(shape, dtype))  # raises if bad
            self.stack_starts = StackStarts(self.frame_stack, shape, dtype, n_envs)
        if rng is None:  # SB3's set_random_seed seeds numpy's global RNG: follow it
            rng = int(np.random.randint(0, 2**63 - 1, dtype=np.int64))  # noqa: NPY002
        self.convert = AddConverter(observation_space, action_space, n_envs)
        #: SB3's layout (arrays ``[buffer_size, n_envs, ...]`` as views of recollect's
        #: storage); False: one copy of each observation in a TransitionBuffer.
        #: compressed observations have no array to view: they take the one-copy layout too
        self.sb3_layout = (
            self.frame_stack is None
            and not self.optimize_memory_usage
            and compression is None
            and not storage_kwargs
        )
        self.compression = compression
        self.transitions: Sb3Arrays | TransitionBuffer
        if self.sb3_layout:
            self.transitions = Sb3Arrays(
                self.buffer_size,
                n_envs,
                obs_spec(observation_space),
                ArraySpec((self.action_dim,), action_dtype(action_space)),
                rng,
                self.make_sampler(),
                store_timeouts=self.handle_timeout_termination,
            )
        else:
            self.transitions = TransitionBuffer(
                self.buffer_size * n_envs,
                n_envs,
                rng,
                prioritized=self.make_sampler(),
                frame_stack=self.frame_stack,
                compression=codecs_of(compression),
                **storage_kwargs,
            )
        self.attach(self.transitions)
        self.cuts = TrajectoryCuts()
        self.no_timeouts = np.zeros(n_envs, np.float32)
        self.num_added = 0

    def attach(self, transitions: Sb3Arrays | TransitionBuffer) -> None:
        """Makes ``transitions`` this buffer's storage (construction, loading)."""
        self.transitions = transitions
        #: the ``truncated`` flags of an add without timeouts (read-only, never copied)
        self.no_truncations = np.zeros(self.n_envs, bool)
        self.no_truncations.flags.writeable = False
        lean = isinstance(transitions, Sb3Arrays) and not transitions.dict_obs
        #: the short ``add`` path: SB3's layout, a Box space, no timeouts to read
        self.lean_adds = lean and not self.handle_timeout_termination
        #: the storage's write of one step (the short ``add`` path), None off that path
        self.write_leaves: Callable[[list[np.ndarray]], None] | None = None
        if self.lean_adds:
            assert isinstance(transitions, Sb3Arrays)
            self.write_leaves = transitions.step_writer()
        #: the one-call ``add`` of one env's exact arrays (recollect.sb3.adds), None off it
        self.add_one: adds.AddOne | None = adds.one_env_adder(self)
        #: whether the first add (which builds a TransitionBuffer's storage) may set add_one
        self.wants_adder = self.add_one is None and not isinstance(transitions, Sb3Arrays)

    def make_sampler(self) -> Prioritized | None:
        """The recollect sampler (None: uniform); :class:`PrioritizedReplayBuffer` overrides it."""
        return None

    def sb3_array(self, name: str) -> Any:
        """SB3's array ``name`` (a view of the storage); AttributeError without SB3's layout."""
        return sb3_array(self, name)

    @property
    def n_steps(self) -> int:
        """SB3's spelling of ``n_step``."""
        return self.n_step

    @property
    def nbytes(self) -> int:
        """Bytes this buffer holds: recollect's storage and the frame-stack bookkeeping."""
        extra = 0 if self.stack_starts is None else self.stack_starts.nbytes
        return self.transitions.nbytes + extra

    # -- writing ----------------------------------------------------------
    def add(
        self,
        obs: Any,
        next_obs: Any,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: Any,
    ) -> None:
        """Stores one transition per env (SB3's ``add``).

        ``next_obs`` is what SB3's off-policy loop passes: the step's next
        observation, with ``infos[i]["terminal_observation"]`` already put in
        for envs that autoreset. With ``handle_timeout_termination`` (and only
        then, as SB3) ``infos`` gives the timeouts: a list of ``n_envs`` dicts
        with ``"TimeLimit.truncated"`` (SB3's VecEnv), a gymnasium 1.x vector
        env's dict of arrays (``"TimeLimit.truncated"`` with its mask
        ``"_TimeLimit.truncated"``), or ``{}``/``[]``. A sampled transition is
        done when ``done`` and not a timeout.

        Raises:
            InvalidArgumentError: shapes that do not fit ``[n_envs, ...]``,
                ``infos`` of another length than ``n_envs`` (when read), or
                (``frame_stack``) an episode start that is not padded;
                recollect's ShapeError/DTypeError/CastError for values that do
                not match the first add. Nothing is written.
        """
        add_one = self.add_one  # CleanRL's exact arrays of one env: one call writes them
        if add_one is None or not add_one(obs, next_obs, action, reward, done):
            adds.write_step(self, obs, next_obs, action, reward, done, infos)
        self.num_added += self.n_envs
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True
            self.pos = 0

    def reset(self) -> None:
        """Forgets every transition (SB3's ``reset``: ``pos = 0``, ``full = False``)."""
        self.transitions.clear()
        if self.stack_starts is not None:
            self.stack_starts.clear()
        super().reset()

    # -- reading ----------------------------------------------------------
    def sample_options(self) -> dict[str, Any]:
        """Keyword arguments of ``TransitionBuffer.sample`` for this buffer."""
        if self.n_step > 1:
            return {"n_step": self.n_step, "discount": self.gamma}
        return {}

    def draw(self, batch_size: int, env: Any = None) -> Sb3Draw:
        """Samples like :meth:`sample` and also returns ids, probabilities and weights.

        Raises:
            NotEnoughDataError: the buffer is empty.
            InvalidArgumentError: ``batch_size`` < 1.
        """
        arrays = self.transitions
        if not isinstance(arrays, Sb3Arrays):  # one copy of each observation
            s = arrays.sample(batch_size, **self.sample_options())
            samples = to_samples(s, env, self.device, self.prioritized, self.n_step > 1)
            return Sb3Draw(samples, s.ids, s.probabilities, s.weights)
        if self.prioritized:
            options = self.sample_options()
            options.pop("n_step", None), options.pop("discount", None)
            d = arrays.replay_buffer.table.draw(
                batch_size, 1, within_episode=False, time_axis=False, **options
            )
            rows, times, ids = d.rows, d.times, d.ids
            probabilities, weights = d.probabilities, d.weights
            batch_inds = times % self.buffer_size
        else:
            batch_inds, rows = self.uniform_draw(batch_size)
            clock = arrays.clock()
            times = clock - 1 - (self.pos - 1 - batch_inds) % self.buffer_size
            ids = id_layout.encode(rows, times)
            upper = self.buffer_size if self.full else self.pos
            probabilities = np.full(batch_size, 1.0 / (upper * self.n_envs))
            weights = None
        fields = gather_fields(arrays, batch_inds, rows, env, self.n_step, self.gamma, self.pos)
        samples = pack(fields, self.device, weights, ids)
        return Sb3Draw(samples, ids, probabilities, weights)

    def uniform_draw(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """SB3's uniform draw: ``(batch_inds, env_indices)`` over the stored transitions."""
        batch_size = positive_int("batch_size", batch_size)
        upper = self.buffer_size if self.full else self.pos
        if upper == 0:
            raise NotEnoughDataError("the replay buffer is empty; add() transitions first.")
        flat = self.transitions.replay_buffer.reader.rng.integers(
            0, upper * self.n_envs, batch_size
        )
        return np.divmod(flat, self.n_envs)

    def sample(self, batch_size: int, env: Any = None) -> Any:
        """``batch_size`` transitions drawn uniformly with replacement, as SB3's tuples.

        Args:
            batch_size: transitions to draw.
            env: SB3's ``VecNormalize`` (or None); observations and rewards are
                normalised with it as SB3 does (n-step: each reward, as SB3's
                ``NStepReplayBuffer``; with ``frame_stack``/``optimize_memory_usage``
                the discounted sum, which differs only where ``clip_reward`` clips).

        Returns:
            ``ReplayBufferSamples`` (``DictReplayBufferSamples`` for Dict
            spaces) of tensors on ``self.device``: observations ``[B, *obs_shape]``,
            actions ``[B, action_dim]``, dones and rewards float32 ``[B, 1]``,
            ``discounts`` float32 ``[B, 1]`` with ``n_step > 1``, else None.

        Raises:
            NotEnoughDataError: the buffer is empty.
            InvalidArgumentError: ``batch_size`` < 1.
        """
        arrays = self.transitions
        if isinstance(arrays, Sb3Arrays) and not self.prioritized:  # common case, fewest steps
            batch_inds, env_indices = self.uniform_draw(batch_size)
            fields = gather_fields(
                arrays, batch_inds, env_indices, env, self.n_step, self.gamma, self.pos
            )
            return pack(fields, self.device)
        return self.draw(batch_size, env).samples

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        """SB3's ``_get_samples``: the transitions at ``batch_inds`` of random envs.

        As SB3, the env of each sample is drawn with numpy's global RNG
        (``np.random.randint``), so a seeded run picks the same envs as SB3's buffer.

        Args:
            batch_inds: int ``[B]`` positions in ``[0, buffer_size)`` of stored transitions.
            env: SB3's ``VecNormalize`` or None.

        Returns:
            What :meth:`sample` returns (prioritized buffers: weights of 1, and ids).
        """
        batch_inds = np.asarray(batch_inds, np.int64).reshape(-1)
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))  # noqa: NPY002
        clock = self.clock()
        times = clock - 1 - (self.pos - 1 - batch_inds) % self.buffer_size
        ids = id_layout.encode(env_indices, times)
        weights = np.ones(len(batch_inds)) if self.prioritized else None
        transitions = self.transitions
        if isinstance(transitions, Sb3Arrays):  # SB3's layout
            fields = gather_fields(
                transitions, batch_inds, env_indices, env, self.n_step, self.gamma, self.pos
            )
            return pack(fields, self.device, weights, ids)
        s = transitions.sample_at(env_indices, times, **self.sample_options())
        return to_samples(s, env, self.device, self.prioritized, self.n_step > 1)

    def clock(self) -> int:
        """Steps added per env since construction (recollect's step time of the next add)."""
        return self.transitions.clock()

    def locate(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """SB3 coordinates ``(batch_inds, env_indices)`` of sampled ``ids`` (int64 ``[B]`` each).

        Where SB3's own buffer, fed the same ``add`` calls, holds the same
        transitions.

        Raises:
            InvalidArgumentError: an id is no longer (or never was) stored.
        """
        ids = np.asarray(ids, np.int64).reshape(-1)
        _, rows, times = id_layout.decode(ids)
        clock, stored = self.clock(), (self.buffer_size if self.full else self.pos)
        if self.sb3_layout:
            stored = min(stored, self.transitions.num_frames() // self.n_envs)
        if ((times >= clock) | (times < clock - stored) | (rows >= self.n_envs)).any():
            raise InvalidArgumentError("some ids are not stored any more; sample again.")
        return times % self.buffer_size, rows

    # -- saving (recollect.sb3.saving) --------------------------------------
    def config(self) -> dict[str, Any]:
        """JSON-able constructor options and counters (the checkpoint's ``sb3.json``)."""
        return saving.buffer_config(self)

    @classmethod
    def options_from_config(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Constructor keyword arguments from the ``options`` of :meth:`config`."""
        return saving.options_from_config(options)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Writes a pickle-free checkpoint directory (see :mod:`recollect.sb3.persistence`).

        Raises:
            CheckpointError: ``path`` is another, non-checkpoint directory.
            InvalidArgumentError: an option cannot be written without pickle
                (a custom ``beta`` callable).
        """
        saving.save_checkpoint(self, path)

    @classmethod
    def load_checkpoint(
        cls,
        path: str | os.PathLike,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
    ) -> Self:
        """Restores a buffer written by :meth:`save_checkpoint` (data, counters, RNG, priorities).

        The spaces are not stored (they are not JSON); pass the model's.

        Raises:
            CheckpointError: damaged files, another format or buffer class, or a
                checkpoint whose geometry differs from what it restores.
        """
        return saving.load_checkpoint(cls, path, observation_space, action_space, device)

    def __copy__(self) -> Self:
        """A copy with its own storage (as ``copy.deepcopy``): a pickle's state holds the
        live storage arrays, which a shallow copy would otherwise share."""
        return copy.deepcopy(self)

    def __getstate__(self) -> dict[str, Any]:
        """SB3's ``save_replay_buffer`` pickle: the attributes, the storage as its kind,
        config and live state arrays (see :mod:`recollect.sb3.persistence`)."""
        return saving.pickle_state(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        saving.restore_pickle_state(self, state)
