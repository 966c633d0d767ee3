"""A dm-reverb checkpoint's table as a new :class:`~recollect.ReplayBuffer` of its episodes.

TF-Agents' Reverb observers (``ReverbAddTrajectoryObserver``, ``ReverbAddEpisodeObserver``)
write items that are windows of consecutive steps of one episode, every column
chunked per step. Such a table holds each episode's steps (once or several times, in
overlapping windows): :func:`from_reverb` puts every stored step of every episode back
together, oldest episode first, and writes the episodes into a buffer as
``recollect import --from minari`` does. A table whose items are not such windows
(squeezed single-step columns, sparse chunks, gaps inside an episode, no signature,
string columns) is refused with a message saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from recollect.buffers import ReplayBuffer
from recollect.datasets.filling import plan_rows, row_length, write_rows
from recollect.errors import InvalidArgumentError, SpecError
from recollect.specs import FlatSpec
from recollect.state.reverb import ReverbTable, read_checkpoint

__all__ = ["from_reverb"]


def _pick(tables: list[ReverbTable], name: str | None, where: Path) -> ReverbTable:
    names = [t.name for t in tables]
    if name is None:
        if len(tables) != 1:
            raise InvalidArgumentError(
                f"the Reverb checkpoint {where} holds {len(tables)} tables {names}; name the "
                "one to import (table=... / --table NAME)."
            )
        return tables[0]
    for table in tables:
        if table.name == name:
            return table
    raise InvalidArgumentError(
        f"the Reverb checkpoint {where} has no table {name!r}; it has {names}."
    )


def _refuse(table: ReverbTable, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Reverb table {table.name!r} cannot be imported as episodes: {why}. Only tables "
        "whose items are windows of consecutive steps of one episode (as TF-Agents' "
        "ReverbAddTrajectoryObserver and ReverbAddEpisodeObserver write) can be; read other "
        "tables with recollect.state.reverb.read_checkpoint."
    )


def _step_spec(table: ReverbTable) -> FlatSpec:
    if table.signature is None:
        raise _refuse(table, "it has no signature, so the step spec is unknown")
    try:
        return FlatSpec(table.step_spec())
    except SpecError as err:
        raise _refuse(table, str(err).rstrip(".")) from err


def _episodes(table: ReverbTable, flat: FlatSpec) -> list[list[np.ndarray]]:
    """Every episode's steps (leaves ``[len, ...]`` in ``flat`` order), oldest first."""
    extents: dict[int, list[int]] = {}  # episode -> [first step, end step, first insert time]
    for item in table.items:
        if item.episode_id is None or item.first_step is None:
            raise _refuse(
                table,
                f"item {item.key} is not one run of consecutive steps of one episode in every "
                "column (squeezed or sparse columns, or columns from different steps)",
            )
        steps = len(item.data[0]) if item.data else 0
        ext = extents.setdefault(item.episode_id, [item.first_step, 0, item.inserted_at_ns])
        ext[0] = min(ext[0], item.first_step)
        ext[1] = max(ext[1], item.first_step + steps)
        ext[2] = min(ext[2], item.inserted_at_ns)
    columns = {
        eid: [np.zeros((end - start, *leaf.shape), leaf.dtype) for leaf in flat.leaves]
        for eid, (start, end, _) in extents.items()
    }
    filled = {eid: np.zeros(end - start, bool) for eid, (start, end, _) in extents.items()}
    for item in table.items:
        eid, first = item.episode_id, item.first_step
        assert eid is not None and first is not None  # checked above
        at = first - extents[eid][0]
        rows = slice(at, at + len(item.data[0]))
        seen = filled[eid][rows]
        for c, data in enumerate(item.data):
            target = columns[eid][c][rows]
            if data.shape[1:] != target.shape[1:]:
                raise _refuse(
                    table,
                    f"item {item.key}'s column {flat.paths[c]!r} has steps of shape "
                    f"{data.shape[1:]}, the signature says {target.shape[1:]}",
                )
            if seen.any() and target[seen].tobytes() != data[seen].tobytes():
                raise _refuse(
                    table, f"item {item.key} disagrees with another item on the same steps"
                )
            target[...] = data
        filled[eid][rows] = True
    for eid, mask in filled.items():
        if not mask.all():
            gap = int(np.argmin(mask)) + extents[eid][0]
            raise _refuse(table, f"episode {eid} has no item holding its step {gap}")
    order = sorted(extents, key=lambda eid: extents[eid][2])
    return [columns[eid] for eid in order]


def from_reverb(
    path: str | Path,
    table: str | None = None,
    capacity: int | None = None,
    num_envs: int = 1,
    **buffer_kwargs: Any,
) -> ReplayBuffer:
    """A new buffer holding the episodes stored in a table of a dm-reverb checkpoint.

    Args:
        path: a Reverb ``DefaultCheckpointer`` root or one checkpoint directory.
        table: the table to import; may be omitted when the checkpoint has one.
        capacity: the buffer's steps; None: exactly the steps found.
        num_envs: buffer rows; episodes are spread over them (see
            :mod:`recollect.datasets.filling`).
        buffer_kwargs: passed to :class:`~recollect.ReplayBuffer` (``rng``, ...).

    Returns:
        The buffer; its spec is the table signature's leaves without their leading
        (time) dimension, with the signature's structure and names.

    Raises:
        CheckpointError: no complete checkpoint, or a damaged file.
        InvalidArgumentError: no such table, several tables and none named, or the table's
            items are not windows of episodes (the message says which item and why).
    """
    where = Path(path)
    found = _pick(read_checkpoint(where).tables, table, where)
    flat = _step_spec(found)
    if not found.items:
        raise _refuse(found, "it holds no items")
    episodes = _episodes(found, flat)
    rows = plan_rows([len(ep[0]) for ep in episodes], num_envs, row_length(capacity, num_envs))
    return write_rows(flat, [[episodes[i] for i in row] for row in rows], capacity, **buffer_kwargs)
