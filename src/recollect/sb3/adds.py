"""This module's one responsibility: the writes of ``recollect.sb3.ReplayBuffer.add``.

Two ways, chosen per call:

- the one-call add of one env (:func:`one_env_adder`): CleanRL's exact arrays
  (``[1, ...]``, the stored dtypes, float64 rewards, bool terminations) go
  straight into the storage's one-row views and the table in a single function
  on the calling thread (SB3's layout: :meth:`Sb3Arrays.one_env_adder`; one copy
  per observation: :func:`~recollect.buffers.transition_rows.one_row_adder`);
- the long way (:func:`write_step`) for everything else: converts and checks
  every argument, reads ``infos`` for timeouts, keeps broken observation chains.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from recollect.buffers import TransitionBuffer
from recollect.buffers.transition_rows import one_row_adder
from recollect.sb3.arrays import Sb3Arrays
from recollect.sb3.spaces import FLOAT32, AddConverter, timeouts_of
from recollect.sb3.stack_starts import StackStarts

__all__ = ["AddOne", "Adding", "one_env_adder", "write_step"]

#: ``add_one(obs, next_obs, action, reward, done) -> bool``: True when it wrote the step
AddOne = Callable[[Any, Any, Any, Any, Any], bool]


class Adding(Protocol):
    """What these writes read and set of a ``recollect.sb3.ReplayBuffer`` (named here, not
    imported: the buffer module imports this one)."""

    n_envs: int
    handle_timeout_termination: bool
    convert: AddConverter
    transitions: Sb3Arrays | TransitionBuffer
    stack_starts: StackStarts | None
    write_leaves: Callable[[list[np.ndarray]], None] | None
    no_timeouts: np.ndarray
    no_truncations: np.ndarray
    add_one: AddOne | None
    wants_adder: bool


def one_env_adder(buf: Adding) -> AddOne | None:
    """The one-call add of ``buf``'s storage, or None where it does not apply: several
    envs, timeouts to read (``handle_timeout_termination``), Dict observations, frame
    stacks, or (one copy per observation) before the first add built the storage."""
    transitions, convert = buf.transitions, buf.convert
    if buf.n_envs != 1 or buf.handle_timeout_termination or convert.dict_obs:
        return None
    if isinstance(transitions, Sb3Arrays):
        return transitions.one_env_adder(convert.obs_dtype, convert.action_dtype)
    if buf.stack_starts is not None:
        return None
    return one_row_adder(transitions, sb3_forms=True)  # None before the first add


def write_step(
    buf: Adding,
    obs: Any,
    next_obs: Any,
    action: Any,
    reward: Any,
    done: Any,
    infos: Any,
) -> None:
    """``buf.add``'s write the long way (everything but the one-call form): converts and
    checks the arguments as SB3's ``add`` takes them, then writes one step per env; the
    caller advances ``pos``. Raises as ``ReplayBuffer.add``; nothing is written then."""
    n, convert = buf.n_envs, buf.convert
    write = buf.write_leaves
    if write is not None:  # SB3's layout, a Box space, no infos to read: CleanRL's case
        write(  # the leaves in the storage's order (Sb3Arrays.write_step)
            [
                convert.actions(action),
                convert.flags(done),
                convert.observations(next_obs),
                convert.observations(obs),
                convert.float_rewards(reward),  # float64 cast as it is written
            ]
        )
        return
    obs, next_obs = convert.observations(obs), convert.observations(next_obs)
    action = convert.actions(action)
    reward = convert.scalars(reward, FLOAT32)
    # as SB3: infos are read only with handle_timeout_termination
    timeout = timeouts_of(infos, n) if buf.handle_timeout_termination else None
    transitions = buf.transitions
    if isinstance(transitions, Sb3Arrays):  # SB3's layout
        transitions.write_step(
            obs,
            next_obs,
            action,
            reward,
            convert.flags(done),
            buf.no_timeouts if timeout is None else timeout.astype(np.float32),
        )
        return
    done = np.asarray(done).reshape(n).astype(bool, copy=False)
    if timeout is None:  # stored as given: a shared read-only array of False
        terminated, timeout = done, buf.no_truncations
    else:
        terminated = done & ~timeout
    if buf.stack_starts is not None:
        buf.stack_starts.check(obs)
    # with the env dim even at n_envs == 1: exact values are written as they are
    transitions.add_batched(obs, action, reward, next_obs, terminated, timeout)
    if buf.stack_starts is not None:
        buf.stack_starts.commit(next_obs)
    if buf.add_one is None and buf.wants_adder:  # the first add built the storage
        buf.wants_adder = False
        buf.add_one = one_env_adder(buf)
