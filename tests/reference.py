"""Plain-Python reference implementations the fast code is checked against.

Nothing here is vectorized or clever: a list of steps per env row, windows
enumerated by looking at every start time. Tests drive the real buffer and a
reference with the same operations and compare.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from recollect import ids as id_layout

__all__ = [
    "ReferenceBuffer",
    "ReferenceTransitions",
    "ReferenceWindows",
    "by_id",
    "valid_window_starts",
    "window_ids",
]


def valid_window_starts(
    is_last: list[bool], first_time: int, num_steps: int, within_episode: bool
) -> list[int]:
    """Start times of the valid ``num_steps`` windows of one row.

    Args:
        is_last: the stored steps' episode-end flags, oldest first.
        first_time: step time of ``is_last[0]``.
        num_steps: window length.
        within_episode: whether no step but a window's last may have ``is_last``.
    """
    starts = []
    for k in range(len(is_last) - num_steps + 1):
        if within_episode and any(is_last[k : k + num_steps - 1]):
            continue
        starts.append(first_time + k)
    return starts


def window_ids(is_last: Any, first_time: int, num_steps: int, within_episode: bool) -> np.ndarray:
    """int64 ids (``recollect.ids.encode(row, start)``) of all valid windows, time-then-row order.

    Args:
        is_last: ``[num_envs, steps]`` episode-end flags of every row, oldest first.
        first_time: step time of column 0.
        num_steps: window length.
        within_episode: whether no step but a window's last may have ``is_last``.
    """
    is_last = np.asarray(is_last, bool)
    num_envs = is_last.shape[0]
    ids = [
        (start, row)
        for row in range(num_envs)
        for start in valid_window_starts(
            is_last[row].tolist(), first_time, num_steps, within_episode
        )
    ]
    ordered = sorted(ids)
    return np.array([int(id_layout.encode(row, start)) for start, row in ordered], dtype=np.int64)


class ReferenceWindows:
    """Per-row step clocks and episode ends of ``num_envs`` rows, kept as plain lists.

    Mirrors :class:`recollect.samplers.windows.WindowIndex`: each row has its own clock
    and keeps its last ``max_length`` steps; ``clear`` forgets them but times
    keep increasing.
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self.num_envs = num_envs
        self.max_length = max_length
        self.times = [0] * num_envs
        self.flags: list[deque[bool]] = [deque(maxlen=max_length) for _ in range(num_envs)]

    @property
    def t(self) -> int:
        """Time of the next write of row 0 (all rows, while they advance together)."""
        return self.times[0]

    @property
    def lo(self) -> int:
        """Time of the oldest stored step of row 0."""
        return self.row_lo(0)

    def row_lo(self, row: int) -> int:
        """Time of the oldest stored step of ``row``."""
        return self.times[row] - len(self.flags[row])

    def advance(self, is_last: list[bool] | None, rows: list[int] | None = None) -> None:
        """Records one step for every row of ``rows`` (all rows by default)."""
        rows = list(range(self.num_envs)) if rows is None else list(rows)
        for k, row in enumerate(rows):
            self.flags[row].append(bool(is_last[k]) if is_last is not None else False)
            self.times[row] += 1

    def clear(self) -> None:
        """Forgets the stored steps; times keep increasing."""
        for flags in self.flags:
            flags.clear()

    def windows(self, num_steps: int, within_episode: bool) -> list[tuple[int, int]]:
        """All valid ``(row, start time)``, ordered by start time, then row."""
        out = []
        for row in range(self.num_envs):
            flags = list(self.flags[row])
            starts = valid_window_starts(flags, self.row_lo(row), num_steps, within_episode)
            out.extend((row, s) for s in starts)
        out.sort(key=lambda rt: (rt[1], rt[0]))
        return out


class ReferenceBuffer:
    """A replay buffer as a list of steps per env row.

    Steps are stored as lists of leaves (numpy arrays) in the spec's flatten
    order; ``is_last_index`` is the position of the leaf marking episode ends
    (None: no episode ends): a bool leaf, or with ``end_value`` a leaf whose steps
    equal to it end an episode (``ReplayBuffer(episode_end=(path, end_value))``).
    Item id of step ``t`` of row ``r`` is ``recollect.ids.encode(r, t)``; every row
    has its own clock.
    """

    def __init__(
        self,
        num_envs: int,
        max_length: int,
        is_last_index: int | None,
        end_value: int | None = None,
    ) -> None:
        self.num_envs = num_envs
        self.max_length = max_length
        self.is_last_index = is_last_index
        self.end_value = end_value
        self.index = ReferenceWindows(num_envs, max_length)
        self.rows: list[deque[list[np.ndarray]]] = [
            deque(maxlen=max_length) for _ in range(num_envs)
        ]

    @property
    def t(self) -> int:
        """Time of the next write of row 0."""
        return self.index.t

    def add_batch(self, leaves: list[np.ndarray], rows: list[int] | None = None) -> None:
        """Appends entry ``k`` of every leaf to row ``rows[k]`` (row ``k`` by default)."""
        rows = list(range(self.num_envs)) if rows is None else list(rows)
        for k, row in enumerate(rows):
            self.rows[row].append([np.array(leaf[k]) for leaf in leaves])
        flags = None
        if self.is_last_index is not None:
            value = self.end_value
            flags = [bool(x if value is None else x == value) for x in leaves[self.is_last_index]]
        self.index.advance(flags, rows)

    def clear(self) -> None:
        """Forgets every step; ids keep increasing."""
        for row in self.rows:
            row.clear()
        self.index.clear()

    def num_frames(self) -> int:
        """Steps stored over all rows."""
        return sum(len(row) for row in self.rows)

    def counts(self) -> list[int]:
        """Steps stored per row."""
        return [len(row) for row in self.rows]

    def item_id(self, row: int, time: int) -> int:
        """Id of step ``time`` of ``row``."""
        return int(id_layout.encode(row, time))

    def row_ids(self, row: int) -> list[int]:
        """Ids of the stored steps of ``row``, oldest first."""
        lo = self.index.row_lo(row)
        return [self.item_id(row, lo + k) for k in range(len(self.rows[row]))]

    def item_ids(self) -> np.ndarray:
        """int64 ``[num_envs, steps_per_row]`` ids, oldest first (rows of equal length)."""
        ids = [self.row_ids(r) for r in range(self.num_envs)]
        return np.array(ids, dtype=np.int64).reshape(self.num_envs, -1)

    def windows(self, num_steps: int, within_episode: bool) -> list[tuple[int, int]]:
        """All valid ``(row, start time)`` windows, time-then-row order."""
        return self.index.windows(num_steps, within_episode)

    def window(self, row: int, time: int, num_steps: int) -> list[list[np.ndarray]]:
        """The ``num_steps`` steps of ``row`` starting at ``time`` (each a list of leaves)."""
        k = time - self.index.row_lo(row)
        assert 0 <= k and k + num_steps <= len(self.rows[row]), "window not stored"
        return [self.rows[row][k + j] for j in range(num_steps)]

    def window_leaves(self, row: int, time: int, num_steps: int | None) -> list[np.ndarray]:
        """Leaves of one window stacked on a time axis (no time axis for ``None``)."""
        steps = self.window(row, time, num_steps or 1)
        stacked = [np.stack([s[i] for s in steps]) for i in range(len(steps[0]))]
        return stacked if num_steps is not None else [x[0] for x in stacked]

    def row_leaves(self, row: int, num_leaves: int) -> list[np.ndarray] | None:
        """Leaves ``[steps, *shape]`` of ``row``, oldest first; None when it stores nothing."""
        if not self.rows[row]:
            return None
        return [np.stack([step[i] for step in self.rows[row]]) for i in range(num_leaves)]

    def gather_all(self, num_leaves: int) -> list[np.ndarray] | None:
        """Leaves ``[num_envs, steps_per_row, *shape]``; None when nothing is stored."""
        if not self.rows[0]:
            return None
        return [
            np.stack([np.stack([step[i] for step in row]) for row in self.rows])
            for i in range(num_leaves)
        ]


def by_id(ids: Any, num_envs: int) -> list[tuple[int, int]]:
    """Splits item ids into ``(row, time)`` pairs."""
    _, rows, times = id_layout.decode(np.asarray(ids).ravel())
    return [(int(r), int(t)) for r, t in zip(rows, times, strict=True)]


class ReferenceTransitions:
    """``(observation, action, reward, next_observation, terminated, truncated)`` per env row.

    Every field is stored as given (two observation copies per step); the
    newest ``max_length`` transitions of each row are kept; ``clear`` keeps
    times (and so ids ``recollect.ids.encode(row, t)``) increasing.
    """

    def __init__(self, num_envs: int, max_length: int) -> None:
        self.num_envs = num_envs
        self.t = 0
        self.rows: list[deque[dict[str, Any]]] = [deque(maxlen=max_length) for _ in range(num_envs)]

    def add(self, row_transitions: list[dict[str, Any]]) -> None:
        """Appends one transition (a dict of fields) to every row."""
        for row, transition in enumerate(row_transitions):
            self.rows[row].append({**transition, "id": int(id_layout.encode(row, self.t))})
        self.t += 1

    def clear(self) -> None:
        """Forgets every transition."""
        for row in self.rows:
            row.clear()

    def by_id(self) -> dict[int, dict[str, Any]]:
        """Stored transitions keyed by id."""
        return {tr["id"]: tr for row in self.rows for tr in row}


class ReferenceTable:
    """Plain model of a table with ``max_times_sampled`` removal and deterministic selectors.

    Rows are lists of ``is_last`` flags with their own clocks; a window ``(row, start)``
    is valid when its steps are stored, no step but its last ends an episode, and it
    was not removed. Counts and removals are keyed by ``(row, start)``.
    """

    def __init__(self, num_envs: int, max_length: int, num_steps: int, max_times: int) -> None:
        self.max_length, self.n, self.max_times = max_length, num_steps, max_times
        self.t = [0] * num_envs
        self.t_clear = [0] * num_envs
        self.flags: list[dict[int, bool]] = [{} for _ in range(num_envs)]
        self.counts: dict[tuple[int, int], int] = {}
        self.removed: set[tuple[int, int]] = set()
        self.priority: dict[tuple[int, int], float] = {}
        # heap ties: the update order (a window's insert, then each priority update)
        self.stamp: dict[tuple[int, int], int] = {}
        self.updates = 0

    def add(self, row: int, is_last: bool) -> None:
        self.flags[row][self.t[row]] = is_last
        self.counts.pop((row, self.t[row]), None)
        self.removed.discard((row, self.t[row]))
        self.priority.pop((row, self.t[row]), None)
        self.t[row] += 1
        self.stamp[(row, self.t[row] - self.n)] = self.updates  # the window just completed
        self.updates += 1

    def set_priority(self, window: tuple[int, int], priority: float) -> None:
        self.priority[window] = priority
        self.stamp[window] = self.updates
        self.updates += 1

    def allowance(self) -> int:
        """Draws the valid windows still allow (``max_times`` - count each)."""
        return sum(self.max_times - self.counts.get(w, 0) for w in self.valid())

    def take(self, window: tuple[int, int]) -> None:
        """One selection (Reverb: each item of a batch): the window must be valid now;
        it is removed once drawn ``max_times`` times, before the next selection."""
        assert window in self.valid(), (window, self.valid())
        self.counts[window] = self.counts.get(window, 0) + 1
        if self.max_times and self.counts[window] >= self.max_times:
            self.removed.add(window)

    def delete(self, window: tuple[int, int]) -> bool:
        """Removes a valid window; False when it is not valid (skipped)."""
        if window not in self.valid():
            return False
        self.removed.add(window)
        return True

    def clear(self) -> None:
        self.t_clear = list(self.t)
        self.removed.clear()

    def valid(self) -> list[tuple[int, int]]:
        """Valid ``(row, start)`` windows in time-then-row order."""
        out = []
        for row, t in enumerate(self.t):
            lo = max(self.t_clear[row], t - self.max_length)
            for s in range(lo, t - self.n + 1):
                if any(self.flags[row][s + k] for k in range(self.n - 1)):
                    continue
                if (row, s) not in self.removed:
                    out.append((row, s))
        return sorted(out, key=lambda w: (w[1], w[0]))

    def ordered(self, kind: str) -> list[tuple[int, int]]:
        """The valid windows in the order a deterministic selector returns them."""
        valid = self.valid()
        if kind == "fifo":
            return valid
        if kind == "lifo":
            return valid[::-1]
        sign = 1.0 if kind == "minheap" else -1.0
        return sorted(valid, key=lambda w: (sign * self.priority.get(w, 1.0), self.stamp[w]))

    def record(self, windows: list[tuple[int, int]]) -> None:
        """Counts a draw (in order) and removes windows sampled ``max_times`` times."""
        for w in windows:
            self.counts[w] = self.counts.get(w, 0) + 1
        if self.max_times:
            self.removed |= {w for w in windows if self.counts[w] >= self.max_times}
