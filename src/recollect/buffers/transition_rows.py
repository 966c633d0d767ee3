"""One-row helpers of :class:`~recollect.buffers.transition_reads.TransitionReader`'s
per-call paths: the step writer (a short write for one env row in a plain ring), the
bitwise chain check of one row, and value copies for ``buf[i]``'s direct reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import optree

from recollect.storage.ring import RingStorage

if TYPE_CHECKING:
    from recollect.buffers.replay_buffer import ReplayBuffer

__all__ = ["Chains", "copy_value", "first_rows", "one_row_adder", "same_bytes", "step_writer"]


def step_writer(buffer: ReplayBuffer, num_envs: int) -> Callable[[list[np.ndarray]], None]:
    """``write(leaves)`` of one step of every row (``[num_envs, ...]`` leaves, checked):
    ``buffer.writer.write_leaves``; or, with one row in a plain RAM ring without rate limiter
    or episode index, the same write made shorter: each leaf into its slot of the row's
    ``[max_length, ...]`` view (``RingStorage.write_unbatched``), then
    ``Table.insert_one``, under the table lock on the calling thread."""
    storage, table = buffer.storage, buffer.table
    plain = type(storage) is RingStorage and table.rate_limiter is None
    if num_envs != 1 or not plain or buffer.writer.episode_aware:
        return buffer.writer.write_leaves
    single = cast(RingStorage, storage).write_unbatched  # type checked above
    insert, lock = table.insert_one, table.lock
    length = buffer.writer.max_length

    def write_one(leaves: list[np.ndarray]) -> None:
        with lock:
            single(table.clock % length, [leaf[0] for leaf in leaves])
            insert(False)

    return write_one


def first_rows(tree: Any) -> Any:
    """Every array of ``tree`` without its leading env dim (row 0)."""
    return optree.tree_map(lambda x: np.asarray(x)[0], tree, none_is_leaf=False)


def copy_value(value: Any) -> Any:
    """A copy of an array read from the ring (a numpy scalar is one already)."""
    return value.copy() if isinstance(value, np.ndarray) else value


def same_bytes(current: list[np.ndarray], pending: list[np.ndarray]) -> bool:
    """Whether every leaf of ``current`` has the bytes of its ``pending`` leaf (one row)."""
    for a, b in zip(current, pending, strict=True):
        if a.tobytes() != b.tobytes():  # C-order bytes: what _row_bytes compares
            return False
    return True


class Chains(Protocol):
    """What :func:`one_row_adder` reads of a ``TransitionReader`` (named here, not imported:
    the reader's module imports this one)."""

    replay_buffer: ReplayBuffer
    num_envs: int
    pending: list[np.ndarray]
    has_pending: np.ndarray
    final_ref: np.ndarray
    first_id: int | None
    next_exact: tuple[tuple[int, ...], np.dtype] | None
    write_step: Callable[[list[np.ndarray]], None]


#: the leaf paths of a TransitionBuffer without frame stacks, in flat (sorted) order
_PLAIN_PATHS = ["action", "observation", "reward", "terminated", "truncated"]


def one_row_adder(
    transitions: Any, *, sb3_forms: bool = False
) -> Callable[[Any, Any, Any, Any, Any], bool] | None:
    """``add_one(observation, next_observation, action, reward, terminated) -> bool``: the
    whole ``add_batched`` of one env row in one call, for a reader whose step writer is the
    one-row writer (:func:`step_writer`) of a single observation array; None elsewhere
    (also before the first add, which builds the reader). Rebuild it after restoring
    ``transitions`` in place: it holds the reader of the time it was built.

    It writes the step (``truncated`` False) and returns True only for exact values whose
    observation continues the row's chain (or starts it): numpy arrays with the env dim,
    ``observation``/``next_observation`` of the stored shape and dtype, ``action``
    ``[1, *action_shape]`` of the stored dtype, ``reward`` ``[1]`` of the stored dtype,
    ``terminated`` bool ``[1]``. With ``sb3_forms`` also what SB3's ``add`` takes of one
    env: an action ``[*action_shape]`` (CleanRL's Discrete actions ``[1]``), a float64
    reward into a float32 leaf (cast as it is written, as SB3's buffer casts). Anything else, or a
    broken chain, returns False with nothing written: the caller takes the long way
    (``add_batched``), which converts, checks and keeps the broken chain's next
    observation. The chain check is the same bitwise compare; the step goes straight
    into the row's ``[max_length, ...]`` views (0-d leaves as Python scalars), then
    ``Table.insert_one``, under the buffer lock on the calling thread.
    """
    # a TransitionBuffer (not imported: its module imports this one) and its reader
    reader: Chains | None = transitions.reader
    if reader is None:
        return None
    buffer = reader.replay_buffer
    flat = buffer.writer.flat_spec
    if (
        reader.num_envs != 1
        or reader.write_step == buffer.writer.write_leaves  # not the one-row writer
        or reader.first_id is not None
        or reader.next_exact is None
        or list(flat.paths) != _PLAIN_PATHS
        or flat.shapes[0] == ()
        or flat.shapes[2:] != [(), (), ()]
        or flat.dtypes[3] != np.bool_
        or flat.dtypes[4] != np.bool_
    ):
        return None
    storage = cast(RingStorage, buffer.storage)  # the one-row writer checked the ring
    table, lock = buffer.table, buffer.writer.lock
    insert, length = table.insert_one, buffer.writer.max_length
    obs_shape, obs_dtype = reader.next_exact
    action_dtype, reward_dtype = np.dtype(flat.dtypes[0]), np.dtype(flat.dtypes[2])
    action_shapes: tuple[tuple[int, ...], ...] = ((1, *flat.shapes[0]),)
    rewards_ok: tuple[np.dtype, ...] = (reward_dtype,)
    if sb3_forms:
        action_shapes += (tuple(flat.shapes[0]),)
        if reward_dtype == np.float32:
            rewards_ok += (np.dtype(np.float64),)
    flags, one, ndarray = np.dtype(np.bool_), (1,), np.ndarray
    held = hold_pending(reader)

    def add_one(observation: Any, next_obs: Any, action: Any, reward: Any, done: Any) -> bool:
        if not (
            type(observation) is ndarray
            and type(next_obs) is ndarray
            and type(action) is ndarray
            and type(reward) is ndarray
            and type(done) is ndarray
            and observation.dtype is obs_dtype
            and next_obs.dtype is obs_dtype
            and action.dtype is action_dtype
            and done.dtype is flags
            and observation.shape == obs_shape
            and next_obs.shape == obs_shape
            and action.shape in action_shapes
            and reward.shape == one
            and done.shape == one
            and reward.dtype in rewards_ok
        ):
            return False
        with lock:
            pending, has_pending = reader.pending[0], reader.has_pending
            if pending is not held[1]:  # the reader's chains were restored: hold them again
                held[:] = hold_pending(reader)
                pending = held[1]
            # bitwise, as same_bytes: memcmp of the bytearray under the pending array and
            # the observation's buffer (C-contiguous: numpy exports it, no bytes copies)
            if has_pending[0] and not (observation.flags.c_contiguous and held[0] == observation):
                return False  # a broken chain: the long way keeps the old next observation
            slot = table.clock % length
            act, obs_rows, rewards, terminated, truncated = storage.single_row
            reader.final_ref[0, slot] = -1
            act[slot] = action  # numpy drops a leading env dim of [1, ...]
            obs_rows[slot] = observation
            rewards[slot] = reward.item()
            terminated[slot] = done.item()
            truncated[slot] = False
            insert(False)
            pending[...] = next_obs
            has_pending[0] = True
        return True

    return add_one


def hold_pending(reader: Chains) -> list[Any]:
    """``[bytearray, array]``: ``reader``'s pending next observation (one row, one leaf),
    moved into an array over a bytearray, which then is ``reader.pending[0]``: a
    ``bytearray == array`` compare is one memcmp of the two buffers (no bytes copies)."""
    old = reader.pending[0]
    raw = bytearray(old.nbytes)
    pending = np.frombuffer(raw, old.dtype).reshape(old.shape)
    pending[...] = old
    reader.pending[0] = pending
    return [raw, pending]
