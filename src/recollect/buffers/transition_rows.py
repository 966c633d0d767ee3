"""One-row helpers of :class:`~recollect.buffers.transition_reads.TransitionReader`'s
per-call paths: the step writer (a short write for one env row in a plain ring), the
bitwise chain check of one row, and value copies for ``buf[i]``'s direct reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import optree

from recollect.storage.ring import RingStorage

if TYPE_CHECKING:
    from recollect.buffers.replay_buffer import ReplayBuffer

__all__ = ["copy_value", "first_rows", "same_bytes", "step_writer"]


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
