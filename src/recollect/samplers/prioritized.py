"""Prioritized experience replay (Schaul et al. 2016, proportional variant).

Every valid window of the buffer's fixed ``sequence_length`` has a priority
``p_i``; windows are drawn (with replacement) with probability::

    P(i) = (p_i + epsilon)^alpha / sum_j (p_j + epsilon)^alpha

``alpha = 0`` is uniform sampling, ``alpha = 1`` fully proportional. Each
sample carries importance weights ``w_i = (N * P(i))^-beta`` (``N`` = number
of valid windows), normalised by default by the largest weight any stored
window can get, ``(N * P_min)^-beta`` (``weight_normalization="buffer"``: cpprb,
OpenAI baselines, TorchRL, Tianshou), or by their max over the batch
(``"batch"``: Dopamine, Reverb-based Acme agents): ``beta = 0`` gives weights
1 (no correction), ``beta = 1`` fully corrects the bias. ``P_min`` comes from
the min tree the :class:`SumTree` keeps beside its sums.

Windows are keyed by the storage slot of their first step,
``row * max_length + time % max_length``, in a :class:`SumTree` holding
``(p + epsilon)^alpha``. One bool per slot says whether its window is valid;
its start time needs no storage: it is the one time of that slot still stored
(in ``[t - max_length, t)`` of the row's clock ``t``), since a window loses its
value when its first step is overwritten. A window gets a value when it becomes complete and
valid (current max priority), and loses it (zero) when its first step is
overwritten or the buffer is cleared. Windows containing an episode end
before their last step never get a value. So invalid windows have zero
probability, always, by construction.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from recollect.errors import InvalidArgumentError, NotEnoughDataError
from recollect.ids import MAX_TIME, ROW_BITS, ROW_SHIFT
from recollect.samplers.base import Sampler, WindowDraw, importance_weights
from recollect.samplers.sum_tree import SumTree
from recollect.windows import WindowIndex

__all__ = ["Prioritized", "check_update"]


def _check_exponent(name: str, value: Any) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"`{name}` must be a finite float >= 0; got {name}={value!r}.")
    return value


class Prioritized(Sampler):
    """Proportional prioritized sampling over windows of a fixed length.

    Args:
        priority_exponent: ``alpha`` >= 0.
        epsilon: added to every priority before the exponent (>= 0) so that
            windows of priority 0 can still be drawn.
        importance_sampling_exponent: default ``beta`` >= 0 when ``sample`` is
            called without one (anneal it with :class:`LinearSchedule`).
        initial_max_priority: priority of new windows until an update raises
            the running max (> 0).
        weight_normalization: ``"buffer"`` (default) divides importance weights by
            ``(N * P_min)^-beta``, the largest weight any stored window can get
            (cpprb, OpenAI baselines, TorchRL, Tianshou): a batch's weights do not
            depend on which windows it happened to draw. ``"batch"`` divides by
            the batch's largest weight (Dopamine; Acme agents on Reverb).

    Raises:
        InvalidArgumentError: an argument out of range; at ``bind``, a buffer
            without ``sequence_length``.

    Example:
        >>> buf = ReplayBuffer(spec, 1000, sampler=Prioritized(0.6), sequence_length=2, rng=0)
        >>> s = buf.sample(32, importance_sampling_exponent=0.4)
        >>> buf.update_priorities(s.ids, np.abs(td_errors))
    """

    def __init__(
        self,
        priority_exponent: float = 0.6,
        epsilon: float = 1e-6,
        *,
        importance_sampling_exponent: float = 0.4,
        initial_max_priority: float = 1.0,
        weight_normalization: str = "buffer",
    ) -> None:
        if weight_normalization not in ("buffer", "batch"):
            raise InvalidArgumentError(
                f'`weight_normalization` must be "buffer" (divide by (N * P_min)^-beta, as '
                f'cpprb) or "batch" (divide by the batch\'s largest weight, as Dopamine); got '
                f"{weight_normalization!r}."
            )
        self.weight_normalization = weight_normalization
        self.priority_exponent = _check_exponent("priority_exponent", priority_exponent)
        self.epsilon = _check_exponent("epsilon", epsilon)
        self.importance_sampling_exponent = _check_exponent(
            "importance_sampling_exponent", importance_sampling_exponent
        )
        self.initial_max_priority = float(initial_max_priority)
        self.max_priority = self.initial_max_priority
        if not np.isfinite(self.max_priority) or self.max_priority <= 0:
            raise InvalidArgumentError(
                f"`initial_max_priority` must be a finite float > 0; got {initial_max_priority!r}."
            )
        self.num_valid = 0
        self.episode_aware: bool | None = None

    def get_config(self) -> dict[str, Any]:
        """Constructor arguments (JSON-able) that rebuild this sampler, state excluded."""
        return {
            "priority_exponent": self.priority_exponent,
            "epsilon": self.epsilon,
            "importance_sampling_exponent": self.importance_sampling_exponent,
            "initial_max_priority": self.initial_max_priority,
            "weight_normalization": self.weight_normalization,
        }

    # -- memory -------------------------------------------------------------
    def estimate_nbytes(self, num_envs: int, max_length: int) -> int:
        size = num_envs * max_length
        raw = size if self.priority_exponent == 0 else 0
        tree = SumTree.estimate_nbytes(size, track_min=self.weight_normalization == "buffer")
        return tree + size + 8 * (raw + 3 * num_envs)

    @property
    def nbytes(self) -> int:
        if getattr(self, "index", None) is None:
            return 0
        arrays = (self._valid, self._priority, self._all_rows, self._row_base, self._last_end)
        return self._tree.nbytes + sum(a.nbytes for a in arrays)

    # -- table hooks ------------------------------------------------------
    def bind(self, index: WindowIndex, sequence_length: int | None) -> None:
        if sequence_length is None:
            raise InvalidArgumentError(
                "Prioritized sampling scores windows of a fixed length; construct the buffer "
                "with sequence_length=... (1 for single steps, 2 for transitions, n + 1 for "
                "n-step windows)."
            )
        super().bind(index, sequence_length)
        self._length = index.max_length
        size = index.num_envs * index.max_length
        # buffer-wide weights need P_min: a min tree beside the sums
        self._tree = SumTree(size, track_min=self.weight_normalization == "buffer")
        # whether the window keyed by each slot is valid (its start: see _start_times)
        self._valid = np.zeros(size, bool)
        # raw priorities are kept only when alpha == 0 (else recovered from the tree values)
        self._priority = np.zeros(size if self.priority_exponent == 0 else 0, np.float64)
        self._all_rows = np.arange(index.num_envs, dtype=np.int64)
        self._row_base = self._all_rows * index.max_length
        self._last_end = index.last_end.copy()

    def _set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Sets the sampling values of ``keys`` in the sum tree (and its min tree)."""
        self._tree.set(keys, values)
        self._values_set(keys, values)

    def _values_set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Called after :meth:`_set` (raw priorities already stored); heaps keep their keys."""

    def min_sampling_value(self) -> float:
        """The smallest positive ``(p_i + epsilon)^alpha`` of a valid window (``inf`` when
        none; NaN with ``weight_normalization="batch"``, which keeps no min tree).
        ``P_min = min_sampling_value() / sampling_weight()[0]``."""
        return self._tree.min if self._tree.track_min else math.nan

    def _value(self, priorities: np.ndarray) -> np.ndarray:
        """``(p + epsilon) ** alpha`` of priorities whose largest passed :meth:`_check_finite`."""
        return np.power(np.add(priorities, self.epsilon), self.priority_exponent)

    def on_add(self, rows: np.ndarray | None, is_last: np.ndarray | None) -> None:
        """Zeroes the windows whose first step was just overwritten; scores the new windows."""
        if self.episode_aware is None:
            self.episode_aware = is_last is not None
        index, n = self.index, self.sequence_length
        assert n is not None  # bind refuses None
        # lo = max(t_clear, t - max_length) and n <= max_length: only t_clear can cut the window
        where: slice | np.ndarray
        if rows is None:  # every row: whole arrays, no fancy indexing
            t, base, cleared = index.t, self._row_base, index.t_clear
            last_end, where = self._last_end, slice(None)
        else:
            where = rows
            t, base, cleared = index.t[rows], self._row_base[rows], index.t_clear[rows]
            last_end = self._last_end[rows]
        # step t - 1 was just written to each row
        gone = base + (t - 1) % self._length
        start = t - n
        ok = start >= cleared
        if is_last is not None:
            ok &= last_end < start  # no episode end before the window's last step
            self._last_end[where] = index.last_end[where]
        self.num_valid -= int(np.count_nonzero(self._valid[gone]))
        self._valid[gone] = False
        value = (self.max_priority + self.epsilon) ** self.priority_exponent  # finite: checked
        if n == 1:  # the new window is keyed by the overwritten slot: set each key once
            self._valid[gone[ok]] = True
            if len(self._priority):
                self._priority[gone[ok]] = self.max_priority
            self.num_valid += int(np.count_nonzero(ok))
            self._set(gone, np.where(ok, value, 0.0))
            return
        new = (base + start % self._length)[ok]
        self._valid[new] = True
        if len(self._priority):
            self._priority[new] = self.max_priority
        self.num_valid += len(new)
        values = np.concatenate([np.zeros(len(gone)), np.full(len(new), value)])
        self._set(np.concatenate([gone, new]), values)

    def on_add_block(self, rows: np.ndarray | None, count: int, is_last: np.ndarray | None) -> None:
        """:meth:`on_add` of ``count`` (<= ``max_length``) steps per row, in one pass.

        Equals ``count`` calls of :meth:`on_add`: every overwritten slot loses its
        window, then every window completed by the block is scored, except those
        crossing an episode end, cleared, or whose first step the block overwrote.
        """
        if self.episode_aware is None:
            self.episode_aware = is_last is not None
        index, n, length = self.index, self.sequence_length, self._length
        assert n is not None  # bind refuses None
        row_ids = self._all_rows if rows is None else rows
        t = index.t[row_ids]  # after the block
        times = (t - count)[:, None] + np.arange(count)  # [k, count] the written times
        base = self._row_base[row_ids][:, None]
        gone = (base + times % length).reshape(-1)
        start = times - (n - 1)  # the window each written step completes
        ok = (start >= index.t_clear[row_ids][:, None]) & (start >= (t - length)[:, None])
        if is_last is not None:  # the newest end before each written step
            ends = np.where(is_last, times, -1)
            before = np.empty_like(ends)
            before[:, 0] = self._last_end[row_ids]
            np.maximum.accumulate(ends[:, :-1], axis=1, out=before[:, 1:])
            np.maximum(before[:, 1:], before[:, :1], out=before[:, 1:])
            ok &= before < start
            self._last_end[row_ids] = index.last_end[row_ids]
        self.num_valid -= int(np.count_nonzero(self._valid[gone]))
        self._valid[gone] = False
        self._set(gone, np.zeros(len(gone)))
        new = (base + start % length).T[ok.T]  # time-major: a heap's insert order, as on_add
        self._valid[new] = True
        if len(self._priority):
            self._priority[new] = self.max_priority
        self.num_valid += len(new)
        value = (self.max_priority + self.epsilon) ** self.priority_exponent
        self._set(new, np.full(len(new), value))

    def on_end_episodes(self, rows: np.ndarray) -> None:
        """Windows of later writes to ``rows`` start after the newly ended episode."""
        self._last_end[rows] = self.index.last_end[rows]

    def sampling_weight(self, num_steps: int, within_episode: bool) -> tuple[float, int]:
        """``(sum of (p_i + epsilon)^alpha, number of valid windows)`` (see the base class)."""
        return float(self._tree.total), int(self.num_valid)

    def on_remove(self, rows: np.ndarray, times: np.ndarray) -> None:
        """Zeroes the removed windows (each keyed by its first step's slot)."""
        keys = np.unique(rows * self._length + times % self._length)
        keys = keys[self._valid[keys]]
        self.num_valid -= len(keys)
        self._valid[keys] = False
        if len(self._priority):
            self._priority[keys] = 0.0
        self._set(keys, np.zeros(len(keys)))

    def on_clear(self) -> None:
        self._tree.clear()
        self._valid[:] = False
        self.num_valid = 0
        self._last_end = self.index.last_end.copy()

    # -- sampling ---------------------------------------------------------
    def sample(
        self,
        batch_size: int,
        num_steps: int,
        within_episode: bool,
        rng: np.random.Generator,
        importance_sampling_exponent: float | None = None,
        **kwargs: Any,
    ) -> WindowDraw:
        """Draws windows with ``P(i) ∝ (p_i + epsilon)^alpha`` and their importance weights.

        Raises:
            InvalidArgumentError: unknown option, ``within_episode=False`` on an
                episode-aware buffer, or a negative exponent. (``num_steps`` other
                than the fixed ``sequence_length`` is refused by the buffer.)
            NotEnoughDataError: every valid window has priority 0 (epsilon=0).
        """
        self._check_request(within_episode, kwargs)
        beta = self.importance_sampling_exponent
        if importance_sampling_exponent is not None:
            beta = _check_exponent("importance_sampling_exponent", importance_sampling_exponent)
        total = self._tree.total
        if total <= 0:
            raise NotEnoughDataError(
                "every valid window has priority 0; update some priorities to values > 0 or "
                "use epsilon > 0."
            )
        keys = self._tree.find(rng.random(batch_size) * total)
        values = self._tree[keys]
        probabilities = values / total
        rows, times = self._start_times(keys)
        if not self._tree.track_min:
            weights = importance_weights(probabilities, self.num_valid, beta)
        else:  # (N P_i)^-beta / (N P_min)^-beta = (v_i / v_min)^-beta
            weights = np.power(values / self._tree.min, -beta)
        priorities = self._priorities(keys, values)
        return WindowDraw(rows, times, probabilities, weights, self.num_valid, priorities)

    def _start_times(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, start times)`` of the valid windows keyed by ``keys``.

        The window keyed by slot ``k`` of row ``r`` starts at the one time
        ``s = k (mod max_length)`` in ``[t[r] - max_length, t[r])``: a window
        whose first step was overwritten is no longer valid.
        """
        rows, slots = np.divmod(keys, self._length)
        oldest = self.index.t[rows] - self._length  # may be < 0: the modulo keeps s >= 0
        return rows, oldest + (slots - oldest) % self._length

    def _priorities(self, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Raw priorities of ``keys``: ``values ** (1 / alpha) - epsilon`` (exact to rounding)."""
        if len(self._priority):
            return self._priority[keys]
        raw = np.power(values, 1.0 / self.priority_exponent)
        raw -= self.epsilon
        return np.maximum(raw, 0.0, out=raw)

    def _check_request(self, within_episode: bool, kwargs: dict) -> None:
        if kwargs:
            raise InvalidArgumentError(
                f"Prioritized sampling takes only importance_sampling_exponent; got "
                f"{sorted(kwargs)}."
            )
        if within_episode != bool(self.episode_aware):
            raise InvalidArgumentError(
                f"Prioritized sampling decides window validity at write time (episode-aware="
                f"{bool(self.episode_aware)}); got within_episode={within_episode}. Leave "
                "within_episode=None."
            )

    # -- priorities -------------------------------------------------------
    def update_priorities(self, ids: Any, priorities: Any, shard: int = 0) -> int:
        """Sets the priorities of the windows whose first step has id ``ids``.

        Args:
            ids: int ``[K]`` window ids as returned by ``sample`` (``Sample.ids``).
            priorities: float ``[K]`` finite priorities >= 0 (e.g. ``|TD error|``).
                With repeated ids the last one wins.
            shard: the table shard this sampler serves; ids of other shards are skipped.

        Returns:
            Number of ids skipped because their window is no longer (or never
            was) valid: overwritten, cleared, crossing an episode end, or of
            another shard.

        Raises:
            InvalidArgumentError: shapes differ, ids are not integers, a
                priority is NaN, inf or negative, or ``(p + epsilon) ** alpha``
                or the sum of all priorities overflows; nothing is changed.
        """
        ids, priorities, largest = self._check_update(ids, priorities)
        if not len(ids):
            return 0
        # ids of this shard's rows: id >> 40 == shard << 15 | row (negative ids never match)
        rows = (ids >> ROW_SHIFT) - (shard << ROW_BITS)
        times = ids & (MAX_TIME - 1)
        live = (rows >= 0) & (rows < self.index.num_envs)
        keys = rows * self._length + times % self._length
        if not live.all():
            keys[~live] = 0
        # the id's window is the valid one of its slot: its time is still stored
        newest = self.index.t[np.where(live, rows, 0)]
        live &= self._valid[keys] & (times < newest) & (times >= newest - self._length)
        skipped = len(ids) - int(np.count_nonzero(live))
        if skipped:
            keys, priorities = keys[live], priorities[live]
            largest = float(priorities.max()) if len(keys) else -1.0
        if len(keys):
            self._check_finite(largest, priorities, keys)
            values = self._value(priorities)
            if len(self._priority):  # before _set: a heap reads the raw priorities there
                self._priority[keys] = priorities
            self._set(keys, values)
            self.max_priority = max(self.max_priority, largest)
        return skipped

    def _check_finite(self, largest: float, priorities: np.ndarray, keys: np.ndarray) -> None:
        """Refuses priorities whose ``(p + epsilon) ** alpha`` or whose sum with the tree overflows.

        Python float arithmetic on the largest priority decides it without a numpy
        overflow warning: the new sum is at most ``total + len(keys) * top``.
        """
        try:
            top = (largest + self.epsilon) ** self.priority_exponent
        except OverflowError:
            top = math.inf
        if self._tree.total + len(keys) * top < math.inf:
            return
        with np.errstate(over="ignore"):  # the exact check, only near the float64 range
            values = self._value(priorities)
            total = self._tree.total - float(self._tree[keys].sum()) + float(values.sum())
        bad = ~np.isfinite(values)
        if not bad.any() and np.isfinite(total):
            return
        first = int(np.flatnonzero(bad)[0]) if bad.any() else int(np.argmax(priorities))
        raise InvalidArgumentError(
            f"priority {float(priorities[first])} overflows: (p + epsilon) ** alpha with alpha="
            f"{self.priority_exponent} (or the sum of all priorities) is not a finite float64. "
            "Nothing was updated; clip or rescale the priorities (e.g. np.minimum(p, 1e6))."
        )

    def _check_update(self, ids: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray, float]:
        return check_update(ids, priorities)

    # -- checkpoints ------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Leaf values, validity and scalars (plain numpy arrays and floats, no pickle)."""
        return {
            "values": self._tree.values.copy(),
            "start": self._start_state(),
            "last_end": self._last_end.copy(),
            "max_priority": self.max_priority,
            "priority_exponent": self.priority_exponent,
            "epsilon": self.epsilon,
            "num_valid": self.num_valid,
            "episode_aware": -1 if self.episode_aware is None else int(self.episode_aware),
            **({"priority": self._priority.copy()} if len(self._priority) else {}),
        }

    def _start_state(self) -> np.ndarray:
        """int64 ``[size]``: start time of the valid window of each slot, -1 where none
        (the checkpoint field ``start``, as format 1 stored it)."""
        start = np.full(len(self._valid), -1, np.int64)
        keys = np.flatnonzero(self._valid)
        start[keys] = self._start_times(keys)[1]
        return start

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict` output (the buffer must have the same shape).

        The window index must be restored first: start times are derived from its clocks.
        """
        values = np.asarray(state["values"], dtype=np.float64)
        if values.shape != (self._tree.capacity,):
            raise InvalidArgumentError(
                f"prioritized sampler state has {values.shape} priorities; this buffer needs "
                f"({self._tree.capacity},). Load it into a buffer of the same capacity."
            )
        _check_state_values(state, values)
        self._tree.fill(values)
        self._valid[:] = np.asarray(state["start"], dtype=np.int64) >= 0
        if len(self._priority):  # alpha == 0: raw priorities are state of their own
            raw = state.get("priority")
            self._priority[:] = np.where(self._valid, 1.0, 0.0) if raw is None else raw
        self._last_end = np.asarray(state["last_end"], dtype=np.int64).copy()
        self.max_priority = float(state["max_priority"])
        self.priority_exponent = float(state["priority_exponent"])
        self.epsilon = float(state["epsilon"])
        self.num_valid = int(state["num_valid"])
        aware = int(state["episode_aware"])
        self.episode_aware = None if aware < 0 else bool(aware)


def _check_state_values(state: dict[str, Any], values: np.ndarray) -> None:
    """Refuses a sampler state with NaN, inf or negative priorities or exponents."""
    scalars = {k: float(state[k]) for k in ("max_priority", "priority_exponent", "epsilon")}
    raw = np.asarray(state.get("priority", np.zeros(0)), dtype=np.float64)
    for name, array in (("values", values), ("priority", raw), *scalars.items()):
        array = np.asarray(array)
        if not np.isfinite(array).all() or (array < 0).any():
            raise InvalidArgumentError(
                f"prioritized sampler state field {name!r} holds NaN, inf or negative values; "
                "the state is damaged. Restore it from a backup or save the buffer again."
            )


def check_update(ids: Any, priorities: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """The checks :meth:`Prioritized.update_priorities` makes of its arguments alone (1-D,
    one length, integer ids, finite priorities >= 0), with its messages; a served table's
    client makes them when it holds an update back, so a bad call fails where it was made.

    Returns:
        ``(ids, priorities, largest)``: int64 and float64 ``[K]`` and the largest priority.

    Raises:
        InvalidArgumentError: as ``Prioritized.update_priorities``.
    """
    ids = np.asarray(ids)
    priorities = np.asarray(priorities, dtype=np.float64)
    if ids.size == 0 and ids.ndim == 1 and priorities.shape == ids.shape:
        return np.zeros(0, np.int64), priorities, 0.0
    if ids.ndim != 1 or ids.shape != priorities.shape:
        raise InvalidArgumentError(
            f"update_priorities needs 1-D ids and priorities of the same shape; got ids "
            f"shape {ids.shape}, priorities shape {priorities.shape}."
        )
    if ids.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"update_priorities needs integer ids (Sample.ids); got dtype {ids.dtype}."
        )
    largest = float(priorities.max()) if len(priorities) else 0.0
    if math.isfinite(largest) and (priorities >= 0).all():  # fast path: no nan, inf, < 0
        return ids.astype(np.int64, copy=False), priorities, largest
    bad = ~np.isfinite(priorities) | (priorities < 0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InvalidArgumentError(
            f"priorities must be finite and >= 0; got {float(priorities[first])} at position "
            f"{first} ({int(bad.sum())} bad value(s)). Nothing was updated; pass e.g. "
            "np.abs(td_error) and check the loss for NaN."
        )
    return ids.astype(np.int64, copy=False), priorities, largest
