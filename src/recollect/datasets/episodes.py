"""Episodes as RLDS step arrays: splitting a buffer's rows, converting to and from transitions.

An *episode* here is a nest shaped like a buffer's ``data_spec`` whose leaves
carry a leading time axis: ``L + 1`` RLDS steps for ``L`` actions. The last
step holds the final observation with ``is_last``; its ``action`` and
``reward`` are zero (RLDS: ``reward`` follows ``action``). Minari and D4RL
store the same episode as ``L + 1`` observations and ``L`` actions, rewards,
terminations and truncations; :func:`rlds_from_transitions` and
:func:`transitions_from_rlds` map one form onto the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import optree

from recollect.errors import SpecError
from recollect.specs import FlatSpec

__all__ = [
    "RLDS_KEYS",
    "Transitions",
    "episode_bounds",
    "require_rlds_spec",
    "rlds_from_transitions",
    "transitions_from_rlds",
]

RLDS_KEYS = ("observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal")


@dataclass(frozen=True)
class Transitions:
    """One episode in the Minari / D4RL form (``L`` actions).

    Attributes:
        observations: nest of arrays ``[L + 1, ...]`` (the final observation included).
        actions: nest of arrays ``[L, ...]``.
        rewards: ``[L]``, the reward that followed each action.
        terminations: bool ``[L]``; at most the last is True.
        truncations: bool ``[L]``; at most the last is True.
    """

    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray


def _map(fn: Any, tree: Any) -> Any:
    return optree.tree_map(fn, tree, none_is_leaf=False)


def require_rlds_spec(flat: FlatSpec, keys: tuple[str, ...], what: str) -> None:
    """Checks that a spec is a mapping with the top-level RLDS ``keys``.

    Raises:
        SpecError: a key is missing or ``is_first``/``is_last``/``is_terminal``
            is not a bool scalar.
    """
    spec = flat.spec
    missing = [k for k in keys if not (hasattr(spec, "keys") and k in spec)]
    if missing:
        raise SpecError(
            f"{what} needs an RLDS step spec with top-level keys {list(keys)}; missing "
            f"{missing} (spec leaves: {flat.paths}). Store steps as observation, action, "
            "reward, discount, is_first, is_last, is_terminal."
        )
    for key in ("is_first", "is_last", "is_terminal"):
        leaf = spec.get(key) if key in keys else None
        if leaf is not None and (leaf.shape != () or leaf.dtype != np.bool_):
            raise SpecError(
                f"{what}: leaf '{key}' must be a bool scalar; got shape {leaf.shape}, "
                f"dtype {leaf.dtype}."
            )


def episode_bounds(
    is_first: np.ndarray | None, is_last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Complete episodes of one row of stored steps (oldest first), vectorized.

    An episode ends at an ``is_last`` step. It starts right after the previous
    ``is_last`` or at an ``is_first`` step, whichever is later. It is complete
    when that start is an ``is_first`` step or follows a stored ``is_last``;
    without an ``is_first`` leaf the row's first stored episode counts as cut.

    Args:
        is_first: bool ``[S]`` or None.
        is_last: bool ``[S]``.

    Returns:
        ``(starts, ends, skipped)``: int64 ``[E]`` first and last step index
        (inclusive) of each complete episode, and the number of episode parts
        that are not complete (cut by the ring at the start of the row, or
        still running at its end).
    """
    ends = np.flatnonzero(is_last)
    after_last = ends + 1
    firsts = np.zeros(0, np.int64) if is_first is None else np.flatnonzero(is_first)
    candidates = np.union1d(np.concatenate([[0], after_last]), firsts)
    starts = candidates[np.searchsorted(candidates, ends, side="right") - 1]
    follows_last = np.isin(starts, after_last)
    opens = np.zeros(len(starts), bool) if is_first is None else is_first[starts]
    complete = follows_last | opens
    n = len(is_last)
    tail = (ends[-1] + 1 if len(ends) else 0) < n  # steps after the last is_last
    skipped = int((~complete).sum()) + int(tail)
    return starts[complete], ends[complete], skipped


def rlds_from_transitions(tr: Transitions, discount_dtype: Any = np.float32) -> dict[str, Any]:
    """Maps one Minari-form episode (``L`` actions) onto ``L + 1`` RLDS steps.

    Step ``t < L`` holds ``observations[t]``, ``actions[t]``, ``rewards[t]`` and
    ``discount = 0`` when action ``t`` terminated the episode, else 1. The
    last step holds ``observations[L]`` with a zero action and reward,
    ``is_last`` and ``is_terminal = terminations[-1]`` (a truncation keeps
    ``is_terminal`` False); its discount is 0 when terminal, else 1.

    Args:
        tr: the episode.
        discount_dtype: dtype of the ``discount`` leaf.

    Returns:
        dict with the :data:`RLDS_KEYS`; leaves ``[L + 1, ...]``.
    """
    length = len(tr.rewards)
    terminal = bool(length and tr.terminations[-1])

    def pad(x: Any) -> np.ndarray:
        x = np.asarray(x)
        return np.concatenate([x, np.zeros((1, *x.shape[1:]), x.dtype)])

    discount = np.ones(length + 1, discount_dtype)
    discount[:length][np.asarray(tr.terminations, bool)] = 0
    discount[length] = 0 if terminal else 1
    edge = np.zeros(length + 1, bool)
    is_first, is_last, is_terminal = edge.copy(), edge.copy(), edge.copy()
    is_first[0], is_last[-1], is_terminal[-1] = True, True, terminal
    return {
        "observation": _map(np.asarray, tr.observations),
        "action": _map(pad, tr.actions),
        "reward": pad(tr.rewards),
        "discount": discount,
        "is_first": is_first,
        "is_last": is_last,
        "is_terminal": is_terminal,
    }


def transitions_from_rlds(episode: Any) -> Transitions:
    """Maps ``L + 1`` RLDS steps of one complete episode onto the Minari form.

    The last step's action and reward are dropped (RLDS stores zeros there);
    the last transition is a termination when the last step has
    ``is_terminal``, else a truncation.

    Args:
        episode: mapping with ``observation, action, reward, is_last,
            is_terminal``; leaves ``[L + 1, ...]`` with ``L >= 1``.
    """
    length = len(episode["is_last"]) - 1
    terminal = bool(episode["is_terminal"][-1])
    terminations = np.zeros(length, bool)
    truncations = np.zeros(length, bool)
    terminations[-1:] = terminal
    truncations[-1:] = not terminal
    return Transitions(
        observations=episode["observation"],
        actions=_map(lambda x: x[:length], episode["action"]),
        rewards=np.asarray(episode["reward"][:length]),
        terminations=terminations,
        truncations=truncations,
    )


def _stored_episodes(buf: Any) -> tuple[list[Any], int]:
    """The complete episodes stored in a buffer, row by row, oldest first.

    The one place that reads a buffer for export: it reads each env row with
    ``gather_row(row)`` (leaves ``[steps, ...]``), so rows written at their own
    pace (``add_batch(..., rows=...)``) export all their complete episodes.

    Args:
        buf: a :class:`~recollect.ReplayBuffer` whose spec has a top-level bool
            ``is_last`` leaf.

    Returns:
        ``(episodes, skipped)``: episode nests (leaves ``[len, ...]``) and the
        number of episode parts left out because their start was overwritten
        by the ring or their end is not stored yet.
    """
    flat = FlatSpec(buf.data_spec)
    episodes: list[Any] = []
    skipped = 0
    for row in range(buf.num_envs):
        one_row = optree.tree_map(lambda x: x[None], buf.reader.gather_row(row))
        for row_episodes, row_skipped in split_rows(flat, one_row):
            episodes.extend(row_episodes)
            skipped += row_skipped
    return episodes, skipped


def split_rows(flat: FlatSpec, data: Any) -> Iterator[tuple[list[Any], int]]:
    """Complete episodes of every row of ``gather_all()``-shaped data.

    Args:
        flat: the buffer's flattened spec (top-level bool ``is_last`` leaf).
        data: nest of leaves ``[num_envs, steps, ...]``, oldest first.

    Yields:
        ``(episodes, skipped)`` per row: episode nests (leaves ``[len, ...]``,
        views of ``data``) and the row's count of incomplete episode parts.
    """
    leaves = flat.flatten(data)
    is_last = leaves[flat.index("is_last")]
    is_first = leaves[flat.index("is_first")] if flat.has_top_level("is_first") else None
    for row in range(is_last.shape[0]):
        starts, ends, skipped = episode_bounds(
            None if is_first is None else is_first[row], is_last[row]
        )
        episodes = [
            flat.unflatten([leaf[row, s : e + 1] for leaf in leaves])
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
        ]
        yield episodes, skipped
